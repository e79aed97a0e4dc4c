package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
)

// Probe says which machines to measure, and how.
type Probe struct {
	// Names are the machines to measure; none is local. All is every machine
	// (then Names must be empty).
	Names []string
	All   bool
	// SSH reaches remote machines; Version is postern's, for the records.
	SSH     sshclient.Options
	Version string
	Logger  *slog.Logger
	// Log gets a line as each of several machines starts and ends, and what
	// agents' installs say; nil is none.
	Log io.Writer
	// Progress, when one machine is measured, is where its agent's upload
	// shows its progress (a terminal); nil is none.
	Progress io.Writer
}

// Measured is one machine measured (its record is stored), or why it could
// not be.
type Measured struct {
	Machine machine.Machine
	Record  *probe.Record
	Err     error
}

// ErrNamesAndAll is a probe given both machine names and All.
var ErrNamesAndAll = errors.New("give machine names or --all, not both")

// ProbeMachines measures machines, each where it is: local in process,
// remote through its agent, several at once. Each record measured is stored.
// The error joins what went wrong: for one machine, its failure; for
// several, which could not be measured (each is in its Measured too).
func ProbeMachines(ctx context.Context, store *records.Store, p Probe) ([]Measured, error) {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	log := p.Log
	if log == nil {
		log = io.Discard
	}
	var ms []machine.Machine
	switch {
	case p.All:
		if len(p.Names) > 0 {
			return nil, ErrNamesAndAll
		}
		var err error
		if ms, err = store.Machines(); err != nil {
			return nil, err
		}
	default:
		names := p.Names
		if len(names) == 0 {
			names = []string{machine.Local}
		}
		for _, n := range names {
			m, err := store.Machine(n)
			if err != nil {
				if errors.Is(err, records.ErrNotFound) {
					return nil, fmt.Errorf("machine %q is not known: add it with 'postern machine add %s --ssh DEST'", n, n)
				}
				return nil, err
			}
			ms = append(ms, m)
		}
	}
	several := len(ms) > 1
	out := make([]Measured, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			start := time.Now()
			if several {
				fmt.Fprintf(log, "postern: measuring %s …\n", m.Name)
			}
			var rec *probe.Record
			var err error
			if m.IsLocal() {
				rec, err = probe.Run(ctx, probe.Options{Name: m.Name, Version: p.Version, Logger: p.Logger})
				if err == nil {
					// The wall's inits kept for this build, so that its
					// first run starts them too (see netwall.KeptInit).
					if _, kerr := netwall.KeptInit(initDir(store)); kerr != nil && p.Logger != nil {
						p.Logger.Warn("the wall's init not kept: runs will keep it", "dir", initDir(store), "err", kerr)
					}
					primeAtExit(initDir(store), p.Logger)
				}
			} else {
				ssh := p.SSH
				ssh.Logger = p.Logger
				r := Remote{SSH: ssh, Agents: store, Warn: log, Version: p.Version}
				if !several && p.Progress != nil {
					r.Progress = p.Progress
				}
				rec, err = ProbeRemote(ctx, m, r)
			}
			if err == nil {
				err = store.PutRecord(rec)
			}
			out[i] = Measured{Machine: m, Record: rec, Err: err}
			if several {
				if err != nil {
					fmt.Fprintf(log, "postern: %s: failed after %s: %v\n", m.Name, time.Since(start).Round(time.Millisecond), err)
				} else {
					fmt.Fprintf(log, "postern: %s: measured in %s\n", m.Name, time.Since(start).Round(time.Millisecond))
				}
			}
		})
	}
	wg.Wait()
	var failed []string
	for _, r := range out {
		if r.Err != nil {
			failed = append(failed, r.Machine.Name)
		}
	}
	switch {
	case !several && len(failed) > 0:
		return out, fmt.Errorf("measure %s: %w", out[0].Machine.Name, out[0].Err)
	case several && len(failed) > 0:
		// Each failure was told on its own line.
		return out, fmt.Errorf("%d of %d machines could not be measured: %s; their records, if any, are unchanged", len(failed), len(ms), strings.Join(failed, ", "))
	}
	return out, nil
}
