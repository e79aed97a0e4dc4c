package main

import (
	"errors"
	"fmt"
	"testing"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/dispatch"
	"github.com/postern-dev/postern/records"
)

// runOutcome keeps the run's own status apart from postern's, also when
// the errors come wrapped.
func TestRunOutcome(t *testing.T) {
	three, seventySeven, signalled := 3, 77, 130
	for _, c := range []struct {
		name string
		run  *records.Run
		err  error
		code int
		why  string
	}{
		{"exited", &records.Run{ExitCode: &three, End: records.EndExited}, nil, 3, records.EndExited},
		{"own 77", &records.Run{ExitCode: &seventySeven, End: records.EndExited}, nil, 77, records.EndExited},
		{"signalled", &records.Run{ExitCode: &signalled, End: records.EndSignalled}, nil, 130, records.EndSignalled},
		{"refused", &records.Run{}, fmt.Errorf("x: %w", &carry.Refusal{}), exitRefused, records.EndRefused},
		{"policy", nil, &dispatch.PolicyError{Err: errors.New("bad")}, exitUsage, whyUsage},
		{"env", nil, &dispatch.EnvError{Name: "X"}, exitUsage, whyUsage},
		{"not found", &records.Run{}, &dispatch.CommandError{NotFound: true}, exitNotFound, records.EndNotFound},
		{"not executable", &records.Run{}, &dispatch.CommandError{}, exitNotExecutable, records.EndNotExecutable},
		{"lost", &records.Run{}, fmt.Errorf("%w: far", dispatch.ErrRunLost), exitLost, records.EndLost},
		{"unrecorded", &records.Run{}, errors.Join(nil, &dispatch.RecordError{Run: &records.Run{ExitCode: &three, End: records.EndExited}, Err: errors.New("full")}), exitPostern, records.EndExited},
		{"other", nil, errors.New("machine x: connection refused"), exitPostern, records.EndStartFailed},
	} {
		code, why := runOutcome(c.run, c.err)
		if code != c.code || why != c.why {
			t.Errorf("%s: runOutcome = %d, %s; want %d, %s", c.name, code, why, c.code, c.why)
		}
	}
}
