package agent

import (
	"context"
	"io"
	"testing"
	"time"
)

// A command the handler could not start goes home as such: the exit frame
// says not-found or not-executable, with the shell's status, so the
// controller tells it apart from a command that exited 127 or 126 itself.
func TestServeSaysACommandWasNotRun(t *testing.T) {
	for _, c := range []struct {
		err    error
		code   int
		notRun string
	}{
		{&NotRunError{Why: NotFound, Detail: `not in PATH=/bin`}, 127, NotFound},
		{&NotRunError{Why: NotExecutable, Detail: "/x: permission denied"}, 126, NotExecutable},
		{nil, 127, ""}, // the command's own 127
	} {
		inR, inW := io.Pipe()
		outR, outW := io.Pipe()
		h := Handlers{Run: func(ctx context.Context, req RunRequest, rio RunIO) (int, error) {
			if c.err != nil {
				return 0, c.err
			}
			rio.OnStart("", nil)
			return 127, nil
		}}
		done := make(chan error, 1)
		go func() { done <- Serve(context.Background(), inR, outW, h); outW.Close() }()
		r := newReader(outR)
		if err := ReadMagic(r); err != nil {
			t.Fatal(err)
		}
		if f, err := ReadFrame(r); err != nil || f.Type != FrameHello {
			t.Fatalf("agent hello: %v %v", f.Type, err)
		}
		w := NewWriter(inW)
		w.WriteRaw([]byte(Magic))
		w.WriteJSON(FrameHello, Hello{Protocol: Protocol})
		w.WriteJSON(FrameRequest, Request{Kind: KindRun, Run: &RunRequest{ID: "r1", Command: []string{"x"}}})
		var exit Exit
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			f, err := ReadFrame(r)
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if f.Type == FrameExit {
				if err := DecodeJSON(f, FrameExit, &exit); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
		if exit.Code != c.code || exit.NotRun != c.notRun || (c.err != nil && exit.Error == "") {
			t.Errorf("%v: exit %+v, want code %d, not_run %q", c.err, exit, c.code, c.notRun)
		}
		inW.Close()
		go io.Copy(io.Discard, outR)
		<-done
	}
}
