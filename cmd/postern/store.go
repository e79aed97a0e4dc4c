package main

import (
	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/records"
)

func openStore() (*records.Store, error) {
	path, err := records.DefaultPath()
	if err != nil {
		return nil, err
	}
	return records.Open(path)
}

// openMachine opens the store and reads the machine called name from it.
func openMachine(name string) (*records.Store, machine.Machine, error) {
	store, err := openStore()
	if err != nil {
		return nil, machine.Machine{}, err
	}
	m, err := store.Machine(name)
	if err != nil {
		return nil, machine.Machine{}, err
	}
	return store, m, nil
}

// openRun opens the store and finds the run id names (a unique prefix of
// its id is enough).
func openRun(id string) (*records.Store, *records.Run, error) {
	store, err := openStore()
	if err != nil {
		return nil, nil, err
	}
	r, err := dispatch.Show(store, id)
	if err != nil {
		return nil, nil, err
	}
	return store, r, nil
}
