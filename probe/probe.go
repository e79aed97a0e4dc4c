package probe

import (
	"context"
	"log/slog"
	"os"
	"os/user"
	"runtime"
	"strconv"
	"time"

	"github.com/postern-dev/postern/internal/kernel"
	"github.com/postern-dev/postern/probe/rung"
)

// Hidden first arguments under which the postern binary runs the probe's
// child processes. They are not for people.
const (
	// ConnectArg ADDR dials ADDR from inside a wall and expects the prober's answer.
	ConnectArg = "__probe-connect"
	// UsernsArg checks, inside a new user namespace, that the ids are mapped.
	UsernsArg = "__probe-userns"
	// NetnsArg configures, inside new user and network namespaces, lo and
	// default routes through it, and checks that addresses are routable.
	NetnsArg = "__probe-netns"
	// SeatbeltArg DOOR OTHER runs under the connect-door profile (macOS): it
	// talks to the door's port, and tries a connection the profile denies.
	SeatbeltArg = "__probe-seatbelt"
	// OverlayArg DIR lays a private layer over DIR/lower inside new user and
	// mount namespaces, as the wall does over a run's home, and checks it.
	OverlayArg = "__probe-overlay"
)

// Options name what is measured and by which postern.
type Options struct {
	Name    string // the machine's name in the inventory
	Version string // postern's version
	Logger  *slog.Logger
}

// rungTimeout bounds each rung: a rung that hangs answers no.
const rungTimeout = 20 * time.Second

// Run measures this machine. Each rung performs the real act in child
// processes, so that a failure cannot hurt the caller, and answers yes or no
// with what happened and, for no, the fix. An error means nothing could be
// measured at all.
func Run(ctx context.Context, opts Options) (*Record, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	start := time.Now()
	rec := &Record{
		Name:       opts.Name,
		OS:         runtime.GOOS,
		Arch:       runtime.GOARCH,
		Kernel:     kernel.Release(),
		OSVersion:  osVersion(),
		Version:    opts.Version,
		User:       whoami(),
		MeasuredAt: start.UTC(),
		Rungs:      map[rung.Name]Rung{},
	}
	for _, r := range rungs() {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rctx, cancel := context.WithTimeout(ctx, rungTimeout)
		t0 := time.Now()
		g := r.measure(rctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rec.Rungs[r.name] = g
		logger.Info("rung measured", "rung", r.name, "result", string(g.Result), "detail", g.Detail,
			"took_ms", time.Since(t0).Milliseconds())
	}
	rec.TookMS = time.Since(start).Milliseconds()
	return rec, nil
}

// measurement is one rung and how it is measured.
type measurement struct {
	name    rung.Name
	measure func(ctx context.Context) Rung
}

func whoami() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "uid " + strconv.Itoa(os.Getuid())
}

func yes(detail string) Rung { return Rung{Result: Yes, Detail: detail} }

func no(detail, remedy string) Rung { return Rung{Result: No, Detail: detail, Remedy: remedy} }
