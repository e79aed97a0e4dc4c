//go:build linux

package benchcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/postern-dev/postern/internal/benchmark"
	"github.com/postern-dev/postern/internal/testhosts"
)

// Report is a benchmark's result, printed as markdown.
type Report interface {
	Markdown(w io.Writer) error
}

// Command is what one benchmark command adds to the common wiring.
type Command struct {
	// Name is the command's name, the prefix of its error lines.
	Name string
	// RootFor says why the command needs root, for the message when it is
	// not root ("it makes network namespaces").
	RootFor string
	// Timeout bounds the whole run.
	Timeout time.Duration
	// Postern receives -postern, the built binary ("" builds ./cmd/postern).
	Postern *string
	// QuickUsage is the help of -quick, Quick what it changes (after the
	// flags are parsed, so it can look at them).
	QuickUsage string
	Quick      func()
	// Skip, when not nil, receives -skip, a comma-separated list of the
	// paths not to run, which SkipUsage names.
	Skip      *[]string
	SkipUsage string
	// Flags adds the command's own flags.
	Flags func(fs *flag.FlagSet)
	// Run measures; the logger writes to stderr.
	Run func(ctx context.Context, log *slog.Logger) (Report, error)
}

// Main parses the flags, runs c and prints its report, exiting non-zero on
// an error.
func Main(c Command) {
	out, _ := c.parse(flag.CommandLine, os.Args[1:]) // flag.ExitOnError
	Exit(c.Name, run(c, out))
}

// parse registers the common flags and c's own on fs, parses args and
// applies -skip and -quick. It returns -out.
func (c Command) parse(fs *flag.FlagSet, args []string) (string, error) {
	var (
		quick bool
		out   string
		skip  string
	)
	fs.StringVar(c.Postern, "postern", "", "built postern binary (default: build ./cmd/postern from the working directory)")
	if c.Skip != nil {
		fs.StringVar(&skip, "skip", "", "comma-separated proxies not to run: "+c.SkipUsage)
	}
	if c.Flags != nil {
		c.Flags(fs)
	}
	fs.BoolVar(&quick, "quick", false, c.QuickUsage)
	fs.StringVar(&out, "out", "", "also write the markdown to this file")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if skip != "" {
		*c.Skip = strings.Split(skip, ",")
	}
	if quick && c.Quick != nil {
		c.Quick()
	}
	return out, nil
}

func run(c Command, out string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()

	_ = testhosts.Sweep() // leftovers of an interrupted earlier run
	rep, err := c.Run(ctx, slog.New(slog.NewTextHandler(os.Stderr, nil)))
	if errors.Is(err, benchmark.ErrNeedsRoot) {
		return fmt.Errorf("needs root (%s): run it with sudo", c.RootFor)
	}
	if err != nil {
		return err
	}
	return benchmark.WriteMarkdown(rep, os.Stdout, out)
}

// Exit prints err after the command's name and exits 1 when err is not nil;
// it returns when err is nil.
func Exit(name string, err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}
