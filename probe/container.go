//go:build linux

package probe

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/postern-dev/postern/carry/container"
	"github.com/postern-dev/postern/carry/netwall"
)

// measureContainer finds a container engine and performs a real walled round
// trip inside a throwaway container started from the probe's own image: the
// wall raised in the container's network namespace, a connection to a
// documentation address redirected to the door's listener on the host side,
// its original destination read back, the container removed.
func measureContainer(ctx context.Context) Rung {
	if os.Geteuid() != 0 {
		return no("not root: the container bridge raises the wall in the container's network namespace from the host",
			"run 'postern machine probe-confinement' as root, with a rootful podman or docker")
	}
	if m, err := os.ReadFile("/proc/self/uid_map"); err == nil && !strings.HasPrefix(strings.Join(strings.Fields(string(m)), " "), "0 0 4294967295") {
		return no(fmt.Sprintf("running inside a user namespace (uid_map %q): a container engine here would not be the host's", strings.TrimSpace(string(m))),
			"measure as root in the host's initial user namespace")
	}
	if _, err := container.HarnessBinary(netwall.Self); err != nil {
		return no(err.Error(), "build postern with CGO_ENABLED=0 (make build) and measure with that binary")
	}
	start := time.Now()
	eng, err := container.Detect(ctx, "")
	if err != nil {
		var ee *container.EngineError
		if errors.As(err, &ee) {
			return no(strings.Join(ee.Tried, "; "), ee.Remedy)
		}
		return no(fmt.Sprintf("find a container engine: %v", err), "")
	}
	img, err := container.BuildImage(ctx, eng, "postern-probe", container.ProbeFiles())
	if err != nil {
		return no(fmt.Sprintf("%s: import the probe's image: %v", eng, err), "check that the engine can import images: '"+eng.Name+" import'")
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		return no(fmt.Sprintf("pipe: %v", err), "")
	}
	defer pr.Close()
	output := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(pr, 64<<10))
		output <- strings.TrimSpace(string(b))
	}()
	target := redirectTarget4
	w, err := container.Raise(ctx, container.Spec{
		Engine:  eng,
		Image:   img,
		Command: []string{container.HarnessPath, ConnectArg, target.String()},
		Run:     fmt.Sprintf("probe-%d", time.Now().UnixNano()),
		Ports:   []uint16{target.Port()},
		Stdout:  pw,
		Stderr:  pw,
		Self:    netwall.Self,
	})
	pw.Close()
	if err != nil {
		<-output
		var ke *netwall.KernelError
		switch {
		case errors.As(err, &ke):
			return no(fmt.Sprintf("%s: raise the wall in a container: %v", eng, ke.Err), ke.Remedy)
		case errors.Is(err, container.ErrNotStatic):
			return no(err.Error(), "build postern with CGO_ENABLED=0 (make build) and measure with that binary")
		}
		return no(fmt.Sprintf("%s: start a walled container: %v", eng, err), "")
	}
	defer w.Close()

	seen := make(chan result, 1)
	go serveOnce(w.Listeners().Transparent, seen)
	if err := w.Start(ctx); err != nil {
		w.Close()
		<-output
		return no(fmt.Sprintf("%s: start the connecting child in the container: %v", eng, err), "")
	}
	code, werr := w.Wait()
	w.Close() // ends serveOnce if nothing came
	got := <-seen
	out := <-output
	took := time.Since(start).Milliseconds()
	remedy := netwall.Remedy(netwall.StepNftables, nil)
	switch {
	case got.err != nil:
		return no(fmt.Sprintf("%s: a connection to %s inside the container did not reach the door: %v (child exit %d %v: %s)", eng, target, got.err, code, werr, out), remedy)
	case got.dst != target:
		return no(fmt.Sprintf("%s: a connection to %s in the container reached the door with original destination %s", eng, target, got.dst), remedy)
	case werr != nil || code != 0:
		return no(fmt.Sprintf("%s: the connecting child in the container failed (exit %d %v): %s", eng, code, werr, out), "")
	}
	return yes(fmt.Sprintf("%s: %s inside a throwaway container reached the door, original destination read back (%d ms)", eng, target, took))
}
