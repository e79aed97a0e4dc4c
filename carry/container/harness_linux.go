package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/internal/pid1"
)

// Paths inside the container.
const (
	// HarnessPath is where postern's static binary is bind-mounted read-only;
	// a command may run it too (the probe's client does).
	HarnessPath = "/.postern/postern"
	// controlDir is the host directory holding the control socket, bind-mounted.
	controlDir = "/.postern/run"
	// controlName is the control socket's name in controlDir.
	controlName = "control.sock"
)

// InitArg is the hidden first argument under which postern runs as the harness,
// the container's pid 1: InitArg -- CMD [ARGS...].
const InitArg = "__container-init"

// Exit statuses of the harness when it cannot report the command's.
const (
	exitHarnessFailed = 125
	exitNotFound      = 127
	exitCannotExec    = 126
	exitKilled        = pid1.KilledStatus
)

// connectTimeout bounds how long the harness tries to reach the host.
const connectTimeout = 10 * time.Second

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Init is the harness: the process the container starts. It connects to the
// host, waits until the host has raised the wall and says start, starts the
// command in its own process group (the terminal's foreground group when there
// is a terminal), reaps every process, forwards signals and returns the status
// to exit with (the command's; 128+n for signal n). When the host's end closes,
// everything in the container is killed. args are the arguments after InitArg.
//
// Init assumes it owns the process: it must only be called from that entry point.
func Init(ctx context.Context, args []string, signals <-chan os.Signal, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintf(stderr, "postern: container harness: no command (usage: %s -- CMD [ARGS...]; it only runs under 'postern run --container')\n", InitArg)
		return exitHarnessFailed
	}
	d := net.Dialer{Timeout: connectTimeout}
	conn, err := d.DialContext(ctx, "unix", controlDir+"/"+controlName)
	if err != nil {
		fmt.Fprintf(stderr, "postern: container harness: reach the host: %v (it only runs under 'postern run --container')\n", err)
		return exitHarnessFailed
	}
	ctl := newControl(conn)
	defer ctl.Close()
	if err := ctl.send(message{Type: msgHello, Version: protocolVersion}); err != nil {
		return exitHarnessFailed
	}
	m, err := ctl.recv()
	if err != nil || m.Type != msgStart {
		// The host went away or refused: nothing was started.
		return exitHarnessFailed
	}
	pid, code, err := startCommand(args)
	if err != nil {
		_ = ctl.send(message{Type: msgError, Code: code, Error: err.Error()})
		fmt.Fprintf(stderr, "postern: %v\n", err)
		return code
	}
	if err := ctl.send(message{Type: msgStarted, Pid: pid}); err != nil {
		pid1.KillAll(pid)
		return exitKilled
	}
	code = supervise(ctx, ctl, pid, signals)
	_ = ctl.send(message{Type: msgExited, Code: code})
	return code
}

// startCommand starts argv, looked up in the container's PATH, in a new process
// group. It returns the exit status to use when it cannot.
func startCommand(argv []string) (int, int, error) {
	path, err := pid1.LookPath(argv[0], defaultPath)
	if err != nil {
		return 0, exitNotFound, err
	}
	wd, err := os.Getwd()
	if err != nil {
		wd = "/"
	}
	attr := &syscall.ProcAttr{
		Dir:   wd,
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Setpgid: true},
	}
	if isTTY(0) {
		// The terminal's foreground group: Ctrl-C and Ctrl-Z reach the command.
		attr.Sys.Foreground = true
		attr.Sys.Ctty = 0
	}
	pid, err := syscall.ForkExec(path, argv, attr)
	switch {
	case errors.Is(err, syscall.ENOENT):
		return 0, exitNotFound, fmt.Errorf("command not found: %s", path)
	case err != nil:
		return 0, exitCannotExec, fmt.Errorf("start %s: %w", path, err)
	}
	return pid, 0, nil
}

func isTTY(fd int) bool {
	_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	return err == nil
}

// supervise runs the command as pid 1 until it ends, forwarding the signals
// the process receives and those the host asks for to its group.
func supervise(ctx context.Context, ctl *control, pid int, signals <-chan os.Signal) int {
	return pid1.Supervise(ctx, pid1.Command{Pid: pid, Signals: signals, Requests: signalRequests(ctl)})
}

// signalRequests reads the host's messages and passes on the signals it asks
// for; the channel closes when the host's end does. The reader ends with the
// process: Init's return is its exit.
func signalRequests(ctl *control) <-chan syscall.Signal {
	reqs := make(chan syscall.Signal)
	go func() {
		defer close(reqs)
		for {
			m, err := ctl.recv()
			if err != nil {
				return
			}
			if m.Type == msgSignal {
				reqs <- syscall.Signal(m.Signal)
			}
		}
	}()
	return reqs
}
