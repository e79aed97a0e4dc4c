package agent

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/postern-dev/postern/door/event"
)

// controllerEnd speaks the controller's side by hand.
type controllerEnd struct {
	w *Writer
	r io.Reader
}

func startServe(t *testing.T, h Handlers) (*controllerEnd, chan error, func()) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), inR, outW, h); outW.Close() }()
	c := &controllerEnd{w: NewWriter(inW), r: newReader(outR)}
	if err := ReadMagic(c.r); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(c.r)
	if err != nil || f.Type != FrameHello {
		t.Fatalf("agent hello: %v %v", f.Type, err)
	}
	c.w.WriteRaw([]byte(Magic))
	c.w.WriteJSON(FrameHello, Hello{Protocol: Protocol})
	// Keep reading what the agent sends, as a controller would.
	go io.Copy(io.Discard, outR)
	return c, done, func() { inW.Close() }
}

func blockingRun(started chan<- time.Time, stopped chan<- time.Time) func(ctx context.Context, req RunRequest, rio RunIO) (int, error) {
	return func(ctx context.Context, req RunRequest, rio RunIO) (int, error) {
		rio.OnStart("", nil)
		started <- time.Now()
		<-ctx.Done()
		stopped <- time.Now()
		return 137, nil
	}
}

func TestServeKillsTheRunWhenHeartbeatsStop(t *testing.T) {
	started, stopped := make(chan time.Time, 1), make(chan time.Time, 1)
	c, done, closeIn := startServe(t, Handlers{Run: blockingRun(started, stopped)})
	defer closeIn()
	// The request is the controller's last word: the agent's silence timer
	// starts when it arrives, which is after t0 and before the run starts.
	t0 := time.Now()
	c.w.WriteJSON(FrameRequest, Request{Kind: KindRun, Run: &RunRequest{ID: "r1", Command: []string{"x"}}})
	<-started
	// The controller now says nothing, without closing the stream.
	select {
	case t1 := <-stopped:
		if d := t1.Sub(t0); d < HeartbeatTimeout || d > HeartbeatTimeout+2*HeartbeatInterval {
			t.Fatalf("the run was stopped %s after the last word from the controller, want just over %s", d, HeartbeatTimeout)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the run went on 10s after the controller fell silent")
	}
	if err := <-done; !errors.Is(err, errHeartbeat) {
		t.Fatalf("Serve = %v, want the heartbeat cause", err)
	}
}

func TestServeKillsTheRunWhenTheStreamEnds(t *testing.T) {
	started, stopped := make(chan time.Time, 1), make(chan time.Time, 1)
	c, done, closeIn := startServe(t, Handlers{Run: blockingRun(started, stopped)})
	c.w.WriteJSON(FrameRequest, Request{Kind: KindRun, Run: &RunRequest{ID: "r1", Command: []string{"x"}}})
	<-started
	t0 := time.Now()
	closeIn()
	select {
	case t1 := <-stopped:
		if d := t1.Sub(t0); d > time.Second {
			t.Fatalf("the run was stopped %s after stdin ended", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the run went on 5s after the controller's stream ended")
	}
	if err := <-done; !errors.Is(err, errControllerGone) {
		t.Fatalf("Serve = %v, want the controller-gone cause", err)
	}
}

func TestServeRunCarriesStreamsEventsAndExit(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	h := Handlers{Run: func(ctx context.Context, req RunRequest, rio RunIO) (int, error) {
		rio.OnStart("abi 7: tcp connect only to ports 53", nil)
		b, _ := io.ReadAll(rio.Stdin)
		rio.Stdout.Write([]byte("out:" + string(b)))
		rio.Stderr.Write([]byte("err"))
		rio.Emit(event.Event{Event: "decision", Host: "a.test", Decision: "deny"})
		return 3, nil
	}}
	go func() { Serve(context.Background(), inR, outW, h); outW.Close() }()
	c, err := Handshake(context.Background(), outR, inW, "test")
	if err != nil {
		t.Fatal(err)
	}
	var out, errb strings.Builder
	var events []event.Event
	var st Started
	exit, err := c.Run(context.Background(), RunRequest{ID: "r", Command: []string{"x"}}, ClientIO{
		Stdin: strings.NewReader("hello"), Stdout: &out, Stderr: &errb,
		OnEvent: func(ev event.Event) { events = append(events, ev) },
		OnStart: func(s Started) { st = s },
	})
	inW.Close()
	if err != nil || exit.Code != 3 || out.String() != "out:hello" || errb.String() != "err" || len(events) != 1 || events[0].Host != "a.test" || !strings.HasPrefix(st.Landlock, "abi 7") {
		t.Fatalf("exit %+v err %v out %q err %q events %+v started %+v", exit, err, out.String(), errb.String(), events, st)
	}
}

func TestClientLosesASilentAgent(t *testing.T) {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	go func() {
		w := NewWriter(outW)
		w.WriteRaw([]byte(Magic))
		w.WriteJSON(FrameHello, Hello{Protocol: Protocol})
		io.Copy(io.Discard, inR) // reads, never answers again
	}()
	defer outW.Close()
	c, err := Handshake(context.Background(), outR, inW, "test")
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	_, err = c.Run(context.Background(), RunRequest{ID: "r"}, ClientIO{Stdout: os.Stdout})
	if !errors.Is(err, ErrLost) || time.Since(t0) > HeartbeatTimeout+time.Second {
		t.Fatalf("Run against a silent agent = %v after %s, want ErrLost after %s", err, time.Since(t0), HeartbeatTimeout)
	}
}
