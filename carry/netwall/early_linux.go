package netwall

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
)

// The command's last stage (ExecArg) is a start of this binary, which costs a
// few milliseconds of runtime and package initialisation before it can drop
// its privileges. The init starts it as soon as it has its configuration, so
// that this happens while the wall goes up, and holds it on a pipe: the stage
// does nothing but wait until the init releases it at Start, and only then
// enters the working directory (as the run's mounts show it), drops every
// privilege and execs the command. Until the release it has nothing of the
// run's: the init is pid 1 of its pid namespace, so if the init ends first,
// the kernel kills it.

// releaseEnv, set in the held stage's environment, names the working
// directory it enters once released; its release pipe is descriptor
// releaseFD. The stage removes it before the command's exec.
const (
	releaseEnv = "POSTERN_WALL_RELEASE_DIR"
	releaseFD  = 3
)

// heldStage is the command's last stage, started and waiting for release.
type heldStage struct {
	done    chan struct{} // closed once started (or failed to)
	pid     int
	release *os.File // write end of the release pipe
	err     error
}

// startHeld starts the last stage for cfg's command in the background; call
// release to let it run the command.
func startHeld(cfg initConfig) *heldStage {
	h := &heldStage{done: make(chan struct{})}
	go func() {
		defer close(h.done)
		r, w, err := os.Pipe()
		if err != nil {
			h.err = fmt.Errorf("start %q: release pipe: %w", cfg.Command[0], err)
			return
		}
		defer r.Close()
		attr := &syscall.ProcAttr{
			Dir:   "/",
			Env:   append(slices.Clip(cfg.Env), releaseEnv+"="+cfg.Dir),
			Files: []uintptr{0, 1, 2, r.Fd()},
			Sys:   &syscall.SysProcAttr{Setsid: true},
		}
		argv := append([]string{os.Args[0], ExecArg}, cfg.Command...)
		pid, err := syscall.ForkExec("/proc/self/exe", argv, attr)
		if err != nil {
			w.Close()
			h.err = fmt.Errorf("start %q in %s: %w", cfg.Command[0], cfg.Dir, err)
			return
		}
		h.pid, h.release = pid, w
	}()
	return h
}

// run releases the stage and returns its pid (in the run's pid namespace).
func (h *heldStage) run() (int, error) {
	<-h.done
	if h.err != nil {
		return 0, h.err
	}
	defer h.release.Close()
	if _, err := h.release.Write([]byte{1}); err != nil {
		return 0, fmt.Errorf("release the command's last stage: %w", err)
	}
	return h.pid, nil
}

// awaitRelease is the held stage's wait: it returns once the init releases
// it, in the working directory the release names. A stage started without
// releaseEnv (by a terminal run's init, at Start) returns at once.
func awaitRelease() error {
	dir, ok := os.LookupEnv(releaseEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(releaseEnv)
	f := os.NewFile(releaseFD, "wall-release")
	var b [1]byte
	n, err := f.Read(b[:])
	f.Close()
	if n != 1 {
		if err == nil {
			err = errors.New("no release")
		}
		return fmt.Errorf("network wall: the init did not release the command (%v)", err)
	}
	if err := os.Chdir(dir); err != nil {
		return fmt.Errorf("network wall: enter the working directory %s: %w", dir, err)
	}
	return nil
}
