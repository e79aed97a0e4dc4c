package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Engine names.
const (
	Podman = "podman"
	Docker = "docker"
)

// ErrNoEngine means no usable container engine was found.
var ErrNoEngine = errors.New("no usable container engine")

// EngineError says why an engine cannot be used, with what would fix it.
type EngineError struct {
	// Tried holds one line per engine looked at: its name and what happened.
	Tried  []string
	Remedy string
}

func (e *EngineError) Error() string {
	return fmt.Sprintf("%v: %s; fix: %s", ErrNoEngine, strings.Join(e.Tried, "; "), e.Remedy)
}

func (e *EngineError) Is(target error) bool { return target == ErrNoEngine }

// Engine is a container engine found on this machine, with the global flags this
// machine needs to run containers with it.
type Engine struct {
	Name          string // Podman or Docker
	Path          string
	Version       string // the server's version
	Runtime       string // the OCI runtime containers run with
	CgroupManager string
	Rootless      bool
	// Adapted says what detection changed from the engine's defaults, for people.
	Adapted []string

	global []string // flags before the subcommand

	mu      sync.Mutex
	ulimits map[int]uint64 // rlimit resource -> value both limits are set to

	remembered bool // recalled rather than detected now
}

// detectTimeout bounds each command detection runs.
const detectTimeout = 30 * time.Second

// Detect finds the engine named name (Podman or Docker), or with name "" the
// first of podman and docker that answers. An engine whose CLI is installed but
// cannot run containers (no daemon, no runtime) is not usable; the error is an
// *EngineError (errors.Is ErrNoEngine) naming what was tried and the fix.
func Detect(ctx context.Context, name string) (*Engine, error) {
	var names []string
	switch name {
	case "":
		names = []string{Podman, Docker}
	case Podman, Docker:
		names = []string{name}
	default:
		return nil, fmt.Errorf("container engine %q: use %s or %s", name, Podman, Docker)
	}
	ee := &EngineError{Remedy: "install podman and runc (Debian: apt-get install podman runc), or start the docker daemon, then choose it with --engine"}
	for _, n := range names {
		path, err := exec.LookPath(n)
		if err != nil {
			ee.Tried = append(ee.Tried, n+": not found in PATH")
			continue
		}
		var e *Engine
		if n == Podman {
			e, err = detectPodman(ctx, path)
		} else {
			e, err = detectDocker(ctx, path)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			ee.Tried = append(ee.Tried, fmt.Sprintf("%s (%s): %v", n, path, err))
			continue
		}
		return e, nil
	}
	return nil, ee
}

// String describes the engine for records and messages.
func (e *Engine) String() string {
	s := fmt.Sprintf("%s %s (runtime %s, cgroups %s", e.Name, e.Version, orUnknown(e.Runtime), orUnknown(e.CgroupManager))
	if e.Rootless {
		s += ", rootless"
	}
	if a := e.adaptedLocked(); len(a) > 0 {
		s += "; adapted: " + strings.Join(a, ", ")
	}
	return s + ")"
}

func (e *Engine) adaptedLocked() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := append([]string(nil), e.Adapted...)
	for _, r := range sortedKeys(e.ulimits) {
		out = append(out, fmt.Sprintf("--ulimit %s=%d:%d", rlimitNames[r], e.ulimits[r], e.ulimits[r]))
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// removeArgs removes a container at once, killing it if it still runs.
func (e *Engine) removeArgs(name string) []string {
	if e.Name == Podman {
		return []string{"rm", "--force", "--time", "0", name}
	}
	return []string{"rm", "--force", name} // docker kills at once
}

// command builds an engine command with the machine's global flags.
func (e *Engine) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.Path, append(append([]string(nil), e.global...), args...)...)
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

// output runs an engine command to completion and returns its stdout; the error
// carries its stderr.
func (e *Engine) output(ctx context.Context, args ...string) ([]byte, error) {
	return runOutput(e.command(ctx, args...))
}

func runOutput(cmd *exec.Cmd) ([]byte, error) {
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = strings.TrimSpace(stdout.String())
		}
		return stdout.Bytes(), fmt.Errorf("%s %s: %w: %s", cmd.Path, strings.Join(cmd.Args[1:], " "), err, firstLines(msg, 3))
	}
	return stdout.Bytes(), nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = append(lines[:n], "…")
	}
	return strings.Join(lines, " | ")
}

// podmanInfo is the part of 'podman info --format json' detection reads.
type podmanInfo struct {
	Host struct {
		CgroupManager string `json:"cgroupManager"`
		OCIRuntime    struct {
			Name string `json:"name"`
			Path string `json:"path"`
		} `json:"ociRuntime"`
		Security struct {
			Rootless bool `json:"rootless"`
		} `json:"security"`
	} `json:"host"`
	Version struct {
		Version string `json:"Version"`
	} `json:"version"`
}

// runtimeMissingRE is podman's complaint when its configured OCI runtime is not
// installed (Debian's podman prefers crun; runc may be the one present).
var runtimeMissingRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`OCI runtime "?([A-Za-z0-9._-]+)"? not found`) })

func detectPodman(ctx context.Context, path string) (*Engine, error) {
	e := &Engine{Name: Podman, Path: path}
	info, err := e.podmanInfo(ctx)
	if err != nil {
		m := runtimeMissingRE().FindStringSubmatch(err.Error())
		if m == nil {
			return nil, err
		}
		alt := ""
		for _, r := range []string{"runc", "crun"} {
			if r == m[1] {
				continue
			}
			if p, lerr := exec.LookPath(r); lerr == nil {
				alt = p
				break
			}
		}
		if alt == "" {
			return nil, fmt.Errorf("the OCI runtime %q podman is configured for is not installed, and neither is runc nor crun (apt-get install runc)", m[1])
		}
		e.global = append(e.global, "--runtime", alt)
		e.Adapted = append(e.Adapted, "--runtime "+alt)
		if info, err = e.podmanInfo(ctx); err != nil {
			return nil, err
		}
	}
	// Without systemd as init, the systemd cgroup manager cannot create scopes.
	if info.Host.CgroupManager == "systemd" && !systemdBooted() {
		e.global = append(e.global, "--cgroup-manager", "cgroupfs")
		e.Adapted = append(e.Adapted, "--cgroup-manager cgroupfs")
		if info, err = e.podmanInfo(ctx); err != nil {
			return nil, err
		}
	}
	e.Version = info.Version.Version
	e.Runtime = info.Host.OCIRuntime.Name
	e.CgroupManager = info.Host.CgroupManager
	e.Rootless = info.Host.Security.Rootless
	return e, nil
}

func (e *Engine) podmanInfo(ctx context.Context) (podmanInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, detectTimeout)
	defer cancel()
	out, err := e.output(ctx, "info", "--format", "json")
	if err != nil {
		return podmanInfo{}, err
	}
	var info podmanInfo
	if err := json.Unmarshal(out, &info); err != nil {
		return podmanInfo{}, fmt.Errorf("read 'podman info': %w", err)
	}
	if info.Version.Version == "" {
		return podmanInfo{}, errors.New("'podman info' reported no version")
	}
	return info, nil
}

func systemdBooted() bool {
	st, err := os.Stat("/run/systemd/system")
	return err == nil && st.IsDir()
}

func detectDocker(ctx context.Context, path string) (*Engine, error) {
	e := &Engine{Name: Docker, Path: path}
	ctx, cancel := context.WithTimeout(ctx, detectTimeout)
	defer cancel()
	out, err := e.output(ctx, "info", "--format", "{{json .}}")
	var info struct {
		ServerVersion   string   `json:"ServerVersion"`
		DefaultRuntime  string   `json:"DefaultRuntime"`
		CgroupDriver    string   `json:"CgroupDriver"`
		SecurityOptions []string `json:"SecurityOptions"`
		ServerErrors    []string `json:"ServerErrors"`
	}
	if jerr := json.Unmarshal(bytes.TrimSpace(out), &info); jerr != nil && err == nil {
		err = fmt.Errorf("read 'docker info': %w", jerr)
	}
	if err == nil && len(info.ServerErrors) > 0 {
		err = errors.New(strings.Join(info.ServerErrors, "; "))
	}
	if err == nil && info.ServerVersion == "" {
		err = errors.New("no docker daemon answered")
	}
	if err != nil {
		return nil, fmt.Errorf("the CLI is installed but cannot run containers (%v): start the docker daemon, or use --engine podman", err)
	}
	e.Version = info.ServerVersion
	e.Runtime = info.DefaultRuntime
	e.CgroupManager = info.CgroupDriver
	for _, o := range info.SecurityOptions {
		if strings.Contains(o, "rootless") {
			e.Rootless = true
		}
	}
	return e, nil
}
