package probe

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/carry/seatbelt"
	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/kernel"
)

// On macOS the Linux rungs answer no, and the seatbelt rung performs the act.
func rungs() []measurement {
	return append(notLinuxRungs(RungUserns, RungNetns, RungNetnsRedirect, RungIPv6, RungLandlock),
		measurement{RungSeatbeltNetworkDeny, measureSeatbelt},
		measurement{RungGPU, MeasureGPU})
}

// osVersion is macOS's product version (sw_vers -productVersion).
func osVersion() string {
	v, err := unix.Sysctl("kern.osproductversion")
	if err != nil {
		return ""
	}
	return v
}

// mDNSResponderSocket is where macOS resolves names for every process: a way
// around the door the profile must deny.
const mDNSResponderSocket = "/var/run/mDNSResponder"

// seatbeltReport is what the seatbelt child prints.
type seatbeltReport struct {
	Door  string `json:"door"`  // "" when the door answered
	Other string `json:"other"` // the error the other port gave; "" if it connected
	DNS   string `json:"dns"`   // the error mDNSResponder's socket gave; "" if it connected
}

// measureSeatbelt raises the connect-door carry as a run gets it (the
// generated profile, sandbox-exec, postern's last step) around a child that
// talks to the door's port, then tries another loopback port where a
// listener waits and mDNSResponder's socket. Yes needs the first to work and
// the other two to be denied.
func measureSeatbelt(ctx context.Context) Rung {
	ver := osVersion()
	macOS := "macOS " + ver + " (Darwin " + kernel.Release() + ")"
	if _, err := os.Stat(seatbelt.SandboxExec); err != nil {
		return no(fmt.Sprintf("%s: %v", macOS, err), "sandbox-exec ships with macOS at "+seatbelt.SandboxExec+"; a system without it cannot give the connect door")
	}
	start := time.Now()
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return no(fmt.Sprintf("%s: listen on 127.0.0.1: %v", macOS, err), "")
	}
	defer other.Close()
	reached := make(chan struct{}, 1)
	go func() {
		if c, err := other.Accept(); err == nil {
			reached <- struct{}{}
			c.Close()
		}
	}()
	self, err := os.Executable()
	if err != nil {
		return no(fmt.Sprintf("%s: find postern's binary: %v", macOS, err), "")
	}
	var out bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		return no(fmt.Sprintf("pipe: %v", err), "")
	}
	copied := make(chan struct{})
	go func() { io.Copy(&out, io.LimitReader(pr, 64<<10)); pr.Close(); close(copied) }()
	home, _ := os.UserHomeDir()
	w, err := seatbelt.Raise(ctx, seatbelt.Spec{
		Run: "probe", Policy: policy.Nothing(),
		Command: []string{self, SeatbeltArg, "door", other.Addr().String()},
		Env:     append(os.Environ(), "HOME="+home),
		Stdout:  pw, Stderr: pw,
	})
	if err != nil {
		pw.Close()
		<-copied
		return no(fmt.Sprintf("%s: raise the connect door: %v", macOS, err), "")
	}
	defer w.Close()
	port := w.Port()
	go answerProbe(w.Listeners().Proxy)
	// The child is told the door's address by its environment, as a run is.
	err = w.Start(ctx)
	pw.Close()
	if err != nil {
		<-copied
		return no(fmt.Sprintf("%s: start under the profile: %v: %s", macOS, err, strings.TrimSpace(out.String())),
			"the profile postern generates was refused; report the output above with 'postern --version'")
	}
	code, werr := w.Wait()
	<-copied
	took := time.Since(start).Milliseconds()
	var rep seatbeltReport
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if jerr := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); jerr != nil || werr != nil {
		return no(fmt.Sprintf("%s: the child under the profile ended with %d %v: %s", macOS, code, werr, strings.TrimSpace(out.String())), "")
	}
	select {
	case <-reached:
		rep.Other = ""
	default:
	}
	switch {
	case rep.Door != "":
		return no(fmt.Sprintf("%s: under the profile, the door's port 127.0.0.1:%d could not be reached: %s", macOS, port, rep.Door), "")
	case rep.Other == "":
		return no(fmt.Sprintf("%s: under the profile, a connection to %s (not the door) was let through", macOS, other.Addr()), "the sandbox does not confine this system's network: do not send runs here")
	case rep.DNS == "":
		return no(fmt.Sprintf("%s: under the profile, mDNSResponder's socket %s could be reached: names could be resolved past the door", macOS, mDNSResponderSocket), "")
	}
	return yes(fmt.Sprintf("%s: under the connect-door profile the door's port 127.0.0.1:%d answered, %s was refused (%s), mDNSResponder's socket was refused (%s); %d ms",
		macOS, port, other.Addr(), rep.Other, rep.DNS, took))
}

// answerProbe answers the child's hello on the door's listener, once.
func answerProbe(l net.Listener) {
	if tl, ok := l.(*net.TCPListener); ok {
		tl.SetDeadline(time.Now().Add(rungTimeout))
	}
	c, err := l.Accept()
	if err != nil {
		return
	}
	defer c.Close()
	_ = answerHello(c) // the child reports what it saw
}

// ChildMain runs the probe child named by arg (SeatbeltArg) with its
// arguments, reports on stdout and returns the exit status.
func ChildMain(ctx context.Context, arg string, args []string, stdout io.Writer) int {
	if arg != SeatbeltArg || len(args) != 2 {
		fmt.Fprintf(stdout, "probe child %q %q: not one of macOS's\n", arg, args)
		return 2
	}
	var rep seatbeltReport
	doorAddr := strings.TrimPrefix(os.Getenv("HTTPS_PROXY"), "http://")
	if err := sayHello(ctx, doorAddr); err != nil {
		rep.Door = err.Error()
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	if c, err := d.DialContext(ctx, "tcp", args[1]); err != nil {
		rep.Other = errText(err)
	} else {
		c.Close()
	}
	if c, err := d.DialContext(ctx, "unix", mDNSResponderSocket); err != nil {
		rep.DNS = errText(err)
	} else {
		c.Close()
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintln(stdout, string(b))
	return 0
}

// errText is the cause of a refused dial, without the addresses around it.
func errText(err error) string {
	var se *os.SyscallError
	if errors.As(err, &se) {
		return se.Err.Error()
	}
	return err.Error()
}
