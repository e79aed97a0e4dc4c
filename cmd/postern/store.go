package main

import (
	"github.com/postern-dev/postern/records"
)

func openStore() (*records.Store, error) {
	path, err := records.DefaultPath()
	if err != nil {
		return nil, err
	}
	return records.Open(path)
}
