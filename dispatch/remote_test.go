package dispatch

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/carry"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/probe/rung"
	"github.com/postern-dev/postern/records"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// fakeAgent speaks the agent's side of the protocol over pipes: it greets with
// a chosen kernel and reports what the controller asked of it.
type fakeAgent struct {
	stdinR  *io.PipeReader
	stdinW  *io.PipeWriter
	stdoutR *io.PipeReader
	stdoutW *io.PipeWriter
	// asked receives the request the controller sent, or nil when the
	// controller closed the stream without asking anything.
	asked chan *agent.Request
}

func (f *fakeAgent) Stdin() io.WriteCloser { return f.stdinW }
func (f *fakeAgent) Stdout() io.Reader     { return f.stdoutR }
func (f *fakeAgent) Wait() error           { return nil }
func (f *fakeAgent) Close() error {
	f.stdinW.Close()
	f.stdoutR.Close()
	return nil
}

func startFakeAgent(t *testing.T, kernel string) (*fakeAgent, *agent.Client) {
	t.Helper()
	f := &fakeAgent{asked: make(chan *agent.Request, 1)}
	f.stdinR, f.stdinW = io.Pipe()
	f.stdoutR, f.stdoutW = io.Pipe()
	go func() {
		defer f.stdoutW.Close()
		w := agent.NewWriter(f.stdoutW)
		if w.WriteRaw([]byte(agent.Magic)) != nil || w.WriteJSON(agent.FrameHello, agent.Hello{Protocol: agent.Protocol, Version: "test", OS: "linux", Arch: "amd64", Kernel: kernel}) != nil {
			f.asked <- nil
			return
		}
		if agent.ReadMagic(f.stdinR) != nil {
			f.asked <- nil
			return
		}
		if _, err := agent.ReadFrame(f.stdinR); err != nil { // the controller's hello
			f.asked <- nil
			return
		}
		fr, err := agent.ReadFrame(f.stdinR)
		if err != nil {
			f.asked <- nil // the stream ended: nothing was asked
			return
		}
		var req agent.Request
		if agent.DecodeJSON(fr, agent.FrameRequest, &req) != nil {
			f.asked <- nil
			return
		}
		f.asked <- &req
		// Pipes here hold nothing: read on while answering.
		go func() { _, _ = io.Copy(io.Discard, f.stdinR) }()
		_ = w.WriteJSON(agent.FrameStarted, agent.Started{})
		_ = w.WriteJSON(agent.FrameExit, agent.Exit{Code: 3})
	}()
	c, err := agent.Handshake(context.Background(), f.stdoutR, f.stdinW, "test")
	if err != nil {
		t.Fatal(err)
	}
	return f, c
}

// measured is a record of far on kernel that says it can wall a remote run.
func measured(kernel string) *probe.Record {
	rec := &probe.Record{Name: "far", OS: "linux", Arch: "amd64", Kernel: kernel, MeasuredAt: time.Now().UTC().Add(-time.Hour), Rungs: map[rung.Name]probe.Rung{}}
	for _, r := range carry.Needs(machine.LaneRemoteLinux) {
		rec.Rungs[r] = probe.Rung{Result: probe.Yes}
	}
	return rec
}

// TestRemoteRunRefusedOnAnotherKernel: the agent says it runs a kernel other
// than the one the record was measured on, so the run is refused, naming both
// kernels and the fix, and its command is never sent to the agent.
func TestRemoteRunRefusedOnAnotherKernel(t *testing.T) {
	store, err := records.Open(filepath.Join(t.TempDir(), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	m := machine.Machine{Name: "far", SSH: "root@192.0.2.1"}
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	spec := Spec{Machine: "far", Command: []string{"touch", "/tmp/must-not-run"}, Stdout: devnull, Stderr: devnull, Warn: io.Discard}

	for _, tc := range []struct {
		name, running string
		refused       bool
	}{
		{"AnotherKernel", "6.99.0-upgraded", true},
		{"SameKernel", "6.1.0-measured", false},
		{"AgentSaysNothing", "", false}, // an agent that does not tell is not refused for it
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := measured("6.1.0-measured")
			run := &records.Run{ID: "r-" + tc.name, Machine: "far", Lane: machine.LaneRemoteLinux, Command: spec.Command, StartedAt: time.Now().UTC()}
			f, c := startFakeAgent(t, tc.running)
			code, err := runOnAgent(context.Background(), store, run, spec, rec, m, nil, c, f)
			f.Close()
			req := <-f.asked
			if !tc.refused {
				if err != nil || code != 3 || req == nil || req.Run == nil || req.Run.Command[0] != "touch" {
					t.Fatalf("runOnAgent = %d, %v; request %+v; want the run sent and its status 3", code, err, req)
				}
				return
			}
			var ref *carry.Refusal
			if !errors.As(err, &ref) {
				t.Fatalf("runOnAgent = %d, %v; want a *carry.Refusal", code, err)
			}
			if req != nil {
				t.Fatalf("the agent was asked %+v although the run was refused", req)
			}
			msg := err.Error()
			t.Log(msg)
			for _, want := range []string{carry.RefusedMarker, "6.1.0-measured", "6.99.0-upgraded", "postern machine probe-confinement far", "lane remote-linux"} {
				if !strings.Contains(msg, want) {
					t.Errorf("refusal %q does not say %q", msg, want)
				}
			}
			// finish records it as refused, as Run does.
			final, ferr := finish(context.Background(), store, run, code, err)
			if !errors.As(ferr, &ref) || final.State != records.StateRefused {
				t.Fatalf("finish = %+v, %v; want a refused record", final, ferr)
			}
		})
	}
}
