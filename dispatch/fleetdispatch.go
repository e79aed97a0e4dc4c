package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/postern-dev/postern/dispatch/fleet"
	"github.com/postern-dev/postern/internal/procstat"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/records"
)

// FleetSpec is one dispatch of a tasks file as a person asked for it.
type FleetSpec struct {
	// ID names the dispatch; "" makes a new one.
	ID   string
	File *fleet.File
	// Max bounds the runs at once (--max); 0 takes the file's.
	Max int
	// Policy is the policy of the walled tasks that have none, neither
	// their own nor the file's (--policy); "" leaves them allowed nothing.
	Policy string
	// Base is what each attempt's run starts from (see FleetRunner.Base).
	Base Spec
	// Dir is where the dispatch was started.
	Dir string
	// Detached is a dispatch carried by a background process of its own.
	Detached bool
	// Prepare, if set, may change each attempt's spec (see FleetRunner).
	Prepare func(*Spec, fleet.Attempt)
	// OnChange sees every change of the dispatch (see fleet.Config).
	OnChange func(fleet.Change, *fleet.Record)
}

// Dispatch places the file's tasks on the machines of the records, runs
// each attempt as an ordinary run, and keeps the dispatch's record in the
// records as it goes. It returns the final record; an error is a dispatch
// that could not begin (nothing was started then).
func Dispatch(ctx context.Context, store *records.Store, fs FleetSpec) (*fleet.Record, error) {
	if fs.File == nil {
		return nil, errors.New("no tasks file")
	}
	if fs.Policy != "" {
		for i := range fs.File.Tasks {
			t := &fs.File.Tasks[i]
			if t.Policy == "" && t.Network == fleet.NetworkWall {
				t.Policy = fs.Policy
			}
		}
	}
	machines, err := FleetMachines(store)
	if err != nil {
		return nil, err
	}
	id := fs.ID
	if id == "" {
		id = fleet.NewID(time.Now())
	}
	pid := os.Getpid()
	d := &records.Dispatch{ID: id, File: fs.File.Filename, State: string(fleet.Running), StartedAt: time.Now().UTC(),
		Pid: pid, PidStart: procstat.StartTime(pid), Detached: fs.Detached}
	saver := newDispatchSaver(store, d, fs.Base.Logger)
	defer saver.close()

	runner := &FleetRunner{Store: store, Base: fs.Base, Dir: fs.Dir, Prepare: fs.Prepare, InWorkTree: fs.Dir != "" && InWorkTree(ctx, fs.Dir)}
	rec, err := fleet.Run(ctx, fleet.Config{
		ID: id, File: fs.File, Machines: machines, Max: fs.Max, Runner: runner, Logger: fs.Base.Logger,
		OnChange: func(c fleet.Change, r *fleet.Record) {
			saver.save(r)
			if fs.OnChange != nil {
				fs.OnChange(c, r)
			}
		},
	})
	if err != nil {
		d.State, d.EndedAt, d.Why = string(fleet.Ended), time.Now().UTC(), err.Error()
		saver.final(nil)
		return nil, err
	}
	if ferr := saver.final(rec); ferr != nil {
		return rec, ferr
	}
	return rec, nil
}

// FleetMachines is the inventory with what was measured of each machine, as
// a dispatch places runs on it.
func FleetMachines(store *records.Store) ([]fleet.Machine, error) {
	ms, err := store.Machines()
	if err != nil {
		return nil, err
	}
	out := make([]fleet.Machine, 0, len(ms))
	for _, m := range ms {
		rec, err := store.Record(m.Name)
		if err != nil && !errors.Is(err, records.ErrNotFound) {
			return nil, err
		}
		out = append(out, fleet.Machine{Machine: m, Record: rec, Slots: m.PerMachine})
	}
	return out, nil
}

// dispatchSaver keeps a dispatch's record in the records while it runs: the
// latest record is written in the background, a newer one replacing an
// older one not yet written, so that the dispatch never waits for the disk.
type dispatchSaver struct {
	store   *records.Store
	d       *records.Dispatch
	logger  *slog.Logger
	mu      sync.Mutex
	latest  *fleet.Record
	wake    chan struct{}
	done    chan struct{}
	stopNow chan struct{} // closed by close: no more waiting between writes
	stopped bool
}

func newDispatchSaver(store *records.Store, d *records.Dispatch, logger *slog.Logger) *dispatchSaver {
	s := &dispatchSaver{store: store, d: d, logger: logger, wake: make(chan struct{}, 1), done: make(chan struct{}), stopNow: make(chan struct{})}
	go s.loop()
	return s
}

func (s *dispatchSaver) save(r *fleet.Record) {
	s.mu.Lock()
	s.latest = r
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// dispatchSaveEvery bounds how often a running dispatch's record is
// written: each write takes the records' lock, which the runs' own records
// wait for.
const dispatchSaveEvery = 250 * time.Millisecond

func (s *dispatchSaver) loop() {
	defer close(s.done)
	var last time.Time
	for range s.wake {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if wait := dispatchSaveEvery - time.Since(last); !stopped && !last.IsZero() && wait > 0 {
			select {
			case <-time.After(wait):
			case <-s.stopNow:
			}
		}
		last = time.Now()
		s.mu.Lock()
		r := s.latest
		s.latest = nil
		stopped = s.stopped
		s.mu.Unlock()
		if r != nil {
			if err := s.write(r); err != nil && s.logger != nil {
				s.logger.Warn("record the dispatch", "dispatch", s.d.ID, "err", err)
			}
		}
		if stopped {
			return
		}
	}
}

func (s *dispatchSaver) write(r *fleet.Record) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	d := *s.d
	d.Record = raw
	d.State = string(r.State)
	d.EndedAt = r.EndedAt
	return s.store.PutDispatch(&d)
}

// final stops the background writes and writes the last record, durably.
func (s *dispatchSaver) final(r *fleet.Record) error {
	s.close()
	if r == nil {
		return s.store.PutDispatch(s.d)
	}
	return s.write(r)
}

func (s *dispatchSaver) close() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	s.stopped = true
	s.mu.Unlock()
	close(s.stopNow)
	select {
	case s.wake <- struct{}{}:
	default:
	}
	<-s.done
}

// DispatchView is a dispatch as the records hold it, with its record read.
type DispatchView struct {
	*records.Dispatch
	// Rec is Record decoded; as JSON, Record is it.
	Rec *fleet.Record `json:"-"`
}

// reconcileDispatch marks a running dispatch whose controller is gone as
// lost, durably (its runs are marked lost by their own records).
func reconcileDispatch(store *records.Store, d *records.Dispatch) (*records.Dispatch, error) {
	if d.State != string(fleet.Running) || controllerAlive(d.Pid, d.PidStart) {
		return d, nil
	}
	d.State = records.DispatchLost
	d.EndedAt = time.Now().UTC()
	d.Why = "the process carrying it (pid " + strconv.Itoa(d.Pid) + ") ended without finishing it"
	return d, store.PutDispatch(d)
}

func view(d *records.Dispatch) (*DispatchView, error) {
	v := &DispatchView{Dispatch: d}
	if len(d.Record) > 0 {
		v.Rec = &fleet.Record{}
		if err := json.Unmarshal(d.Record, v.Rec); err != nil {
			return nil, fmt.Errorf("dispatch %s: its record does not decode: %w", d.ID, err)
		}
	}
	return v, nil
}

// Dispatches lists every dispatch, oldest first, a lost one marked.
func Dispatches(store *records.Store) ([]*DispatchView, error) {
	ds, err := store.Dispatches()
	if err != nil {
		return nil, err
	}
	out := make([]*DispatchView, 0, len(ds))
	for _, d := range ds {
		d, _ = reconcileDispatch(store, d)
		v, err := view(d)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ShowDispatch returns one dispatch (a unique prefix of its id is enough).
func ShowDispatch(store *records.Store, id string) (*DispatchView, error) {
	d, err := store.Dispatch(id)
	if err != nil {
		return nil, err
	}
	if d, err = reconcileDispatch(store, d); err != nil {
		return nil, err
	}
	return view(d)
}

// DispatchEnded reports whether a dispatch has reached its end.
func DispatchEnded(d *records.Dispatch) bool { return d.State != string(fleet.Running) }

// WaitDispatch waits until the dispatch has ended and returns it.
func WaitDispatch(ctx context.Context, store *records.Store, id string) (*DispatchView, error) {
	for {
		v, err := ShowDispatch(store, id)
		if err != nil {
			return nil, err
		}
		if DispatchEnded(v.Dispatch) {
			return v, nil
		}
		select {
		case <-ctx.Done():
			return v, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ErrDispatchEnded is a cancel of a dispatch that has already ended.
var ErrDispatchEnded = errors.New("the dispatch has already ended")

// CancelDispatch asks the process carrying a dispatch to cancel it, as
// Ctrl-C would: its running tasks are stopped on their machines and recorded
// cancelled, its queued ones never start. It returns once the process was
// told; WaitDispatch follows it to its end.
func CancelDispatch(store *records.Store, id string) (*DispatchView, error) {
	v, err := ShowDispatch(store, id)
	if err != nil {
		return nil, err
	}
	if DispatchEnded(v.Dispatch) {
		return v, fmt.Errorf("dispatch %s: %w (%s)", v.ID, ErrDispatchEnded, v.State)
	}
	if !controllerAlive(v.Pid, v.PidStart) {
		return v, fmt.Errorf("dispatch %s: the process carrying it (pid %d) is gone", v.ID, v.Pid)
	}
	if err := syscall.Kill(v.Pid, syscall.SIGTERM); err != nil {
		return v, fmt.Errorf("dispatch %s: tell its process (pid %d) to cancel it: %w", v.ID, v.Pid, err)
	}
	return v, nil
}

// RunsOf keeps the runs of one dispatch (a unique prefix of its id is
// enough).
func RunsOf(store *records.Store, runs []*records.Run, dispatch string) ([]*records.Run, error) {
	d, err := store.Dispatch(dispatch)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(runs, func(r *records.Run) bool { return r.Dispatch != d.ID }), nil
}

// LabelMachine sets labels on a machine (key=value; a bare key is
// key=yes), removes those named "key-", and sets its own per_machine when
// perMachine is not nil (0 leaves it to the tasks file). It returns the
// machine as it is now.
func LabelMachine(store *records.Store, name string, labels []string, perMachine *int) (machine.Machine, error) {
	m, err := store.Machine(name)
	if err != nil {
		if errors.Is(err, records.ErrNotFound) {
			return m, fmt.Errorf("machine %q is not known: add it with 'postern machine add %s --ssh DEST'", name, name)
		}
		return m, err
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	for _, l := range labels {
		if k, ok := strings.CutSuffix(l, "-"); ok && !strings.Contains(k, "=") {
			delete(m.Labels, k)
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			v = "yes"
		}
		if !labelRE().MatchString(k) || strings.ContainsAny(v, "\x00\n\r") {
			return m, fmt.Errorf("label %q: write key=value, a bare key (key=yes), or key- to remove it; a key is letters, digits, '.', '_', '-' and '/'", l)
		}
		m.Labels[k] = v
	}
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	if perMachine != nil {
		if *perMachine < 0 || *perMachine > 1024 {
			return m, fmt.Errorf("--per-machine %d: give a number of runs at once from 1 to 1024, or 0 to take the tasks file's", *perMachine)
		}
		m.PerMachine = *perMachine
	}
	if m.IsLocal() && m.AddedAt.IsZero() {
		m.AddedAt = time.Now().UTC()
	}
	return m, store.PutMachine(m)
}

var labelRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$`) })
