//go:build linux

package benchmark

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// The benchmarks re-execute the test binary: as the wall benchmark's client
// (directly and behind the wall) and as the idle-tunnel echo child.
func TestMain(m *testing.M) {
	switch {
	case WallClientRequested():
		if err := ServeWallClient(context.Background(), os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	case ChildRequested():
		if err := ServeChild(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRunWallSmall runs the wall benchmark end to end at a small size and
// checks that every figure was measured and is plausible.
func TestRunWallSmall(t *testing.T) {
	testhosts.RequireRoot(t)
	if testing.Short() {
		t.Skip("builds postern and raises walls; skipped with -short")
	}
	for _, tool := range []string{"bwrap", "true"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the wall benchmark compares with %s: %v (apt-get install bubblewrap)", tool, err)
		}
	}
	bin := filepath.Join(t.TempDir(), "postern")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/postern")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build postern: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunWall(ctx, WallConfig{
		Postern: bin, Startups: 3, NoSRT: true,
		BulkBytes: 16 << 20, BulkRuns: 1, SetupSamples: 40,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := rep.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	// The unprivileged lane's sandboxes need a user namespace, which a
	// machine may refuse that user (a sysctl, a seccomp or AppArmor
	// profile): then their rows must say why instead.
	measured := []string{startBare, startBwrap, startPostern, startPosternGoInit, startBareUser}
	if unprivilegedUserns() {
		measured = append(measured, startBwrapUser, startPosternUser, startPosternUserGoInit)
	} else if s := rep.startup(startPosternUser); s == nil || s.Err == "" || len(s.Samples) != 0 {
		t.Errorf("uid %d may not make a user namespace here, yet postern's row: %+v", benchUID, s)
	} else {
		t.Logf("uid %d may not make a user namespace here: %s", benchUID, s.Err)
	}
	for _, name := range measured {
		s := rep.startup(name)
		if s == nil || s.Err != "" || len(s.Samples) != 3 || s.P50() <= 0 {
			t.Errorf("start-up %s: %+v\n%s", name, s, md.String())
		}
	}
	if s := rep.startup(startSRT); s == nil || len(s.Samples) != 0 || !strings.Contains(s.Err, "left out") {
		t.Errorf("srt left out, yet: %+v", s)
	}
	// A walled start-up raises namespaces and a door: it cannot be as quick
	// as exec'ing true.
	if b, p := rep.startup(startBare), rep.startup(startPostern); p.P50() <= b.P50() {
		t.Errorf("postern run -- true (%v) no slower than bare true (%v)", p.P50(), b.P50())
	}
	if b, p := rep.startup(startBareUser), rep.startup(startPosternUser); len(p.Samples) > 0 && p.P50() <= b.P50() {
		t.Errorf("postern run -- true as uid %d (%v) no slower than bare true (%v)", benchUID, p.P50(), b.P50())
	}
	// The kernel counts the init and the command with postern, since
	// postern waits for them: more processor time and more page faults
	// than one exec of true.
	if b, p := rep.startup(startBare), rep.startup(startPostern); len(p.CPU) != 3 || p.CPUP50() <= b.CPUP50() || countP50(p.Faults) <= countP50(b.Faults) {
		t.Errorf("postern run -- true: cpu %v, faults %v; bare true: cpu %v, faults %v", p.CPU, p.Faults, b.CPU, b.Faults)
	}
	if len(rep.Paths) != 2 {
		t.Fatalf("paths: %+v", rep.Paths)
	}
	for _, p := range rep.Paths {
		if p.Err != "" || p.Throughput <= 0 || p.SetupP50 <= 0 || p.SetupP99 < p.SetupP50 {
			t.Errorf("path %s: %+v", p.Name, p)
		}
	}
	for _, want := range []string{"### Start-up", "`postern run -- true`", "`postern run -- true (uid 65534)` over `true (uid 65534)`", "through the wall (postern run)", "### Start-up: processor time", "### The wall against its goals"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, md.String())
		}
	}
}

func TestMeasureStartupsSaysWhyACommandWasNotMeasured(t *testing.T) {
	flag := filepath.Join(t.TempDir(), "tried")
	res := measureStartups(context.Background(), t.TempDir(), []startCmd{
		{name: "ok", argv: []string{"true"}},
		{name: "fails", argv: []string{"sh", "-c", "echo it broke >&2; exit 3"}},
		{name: "missing", argv: []string{"no-such-sandbox-xyz"}},
		{name: "skipped", argv: []string{"true"}, skip: "npm not found"},
		// Fails its first start only, as a sandbox whose own start races
		// itself may.
		{name: "second", argv: []string{"sh", "-c", `[ -e "$0" ] && exit 0; : > "$0"; echo not yet >&2; exit 1`, flag}},
	}, 4)
	if len(res[0].Samples) != 4 || res[0].Err != "" {
		t.Errorf("ok: %+v", res[0])
	}
	// What the kernel counted of each run: a process that ran took some
	// processor time and faulted its first pages in.
	if len(res[0].CPU) != 4 || res[0].CPU[0] <= 0 || len(res[0].Faults) != 4 || res[0].Faults[0] <= 0 || len(res[0].Switches) != 4 {
		t.Errorf("ok: cpu %v, faults %v, switches %v", res[0].CPU, res[0].Faults, res[0].Switches)
	}
	if !slices.IsSorted(res[0].CPU) || !slices.IsSorted(res[0].Faults) || !slices.IsSorted(res[0].Switches) {
		t.Errorf("counts not sorted: %v %v %v", res[0].CPU, res[0].Faults, res[0].Switches)
	}
	if s := res[4]; len(s.Samples) != 4 || s.Err != "" || !strings.Contains(s.FirstTries, "not yet") {
		t.Errorf("second: %d samples, err %q, first tries %q", len(s.Samples), s.Err, s.FirstTries)
	}
	if s := res[1]; !strings.Contains(s.Err, fmt.Sprintf("%d times", startTries)) || s.FirstTries != "" {
		t.Errorf("fails: err %q, first tries %q", s.Err, s.FirstTries)
	}
	for i, want := range []string{"", "it broke", "not found", "npm not found"} {
		if i == 0 {
			continue
		}
		if len(res[i].Samples) != 0 || len(res[i].CPU) != 0 || !strings.Contains(res[i].Err, want) {
			t.Errorf("%s: err %q, %d samples; want %q", res[i].Name, res[i].Err, len(res[i].Samples), want)
		}
	}
	for i := 1; i < len(res[0].Samples); i++ {
		if res[0].Samples[i] < res[0].Samples[i-1] {
			t.Fatalf("samples not sorted: %v", res[0].Samples)
		}
	}
}

func TestWallMarkdownGoals(t *testing.T) {
	ms := func(v ...float64) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x*float64(time.Millisecond)))
		}
		return out
	}
	rep := &WallReport{
		Config: WallConfig{Startups: 3, BulkBytes: 1 << 20, BulkRuns: 1, SetupSamples: 10},
		Startup: []StartupResult{
			{Name: startBare, Command: "true", Samples: ms(1, 1, 1), CPU: ms(0.5, 0.5, 0.6), Faults: []int64{100, 100, 110}, Switches: []int64{1, 1, 2}},
			{Name: startBwrap, Command: "bwrap --unshare-net --ro-bind / / true", Samples: ms(4, 4, 5), CPU: ms(3, 3, 3), Faults: []int64{200, 210, 220}, Switches: []int64{10, 12, 14}},
			{Name: startPostern, Command: "postern run -- true", Samples: ms(30, 31, 40), CPU: ms(36, 37, 50), Faults: []int64{1100, 1200, 1300}, Switches: []int64{200, 250, 300}},
			{Name: startSRT, Command: "srt -c true", Samples: ms(600, 620, 700), FirstTries: "its first 1 start(s) failed, then one worked; the first: exit status 1: bridges"},
		},
		Paths: []WallPath{
			{Name: "direct", Throughput: 2e9, SetupP50: 200 * time.Microsecond, SetupP99: 400 * time.Microsecond},
			{Name: "wall", Throughput: 1e9, SetupP50: 700 * time.Microsecond, SetupP99: 900 * time.Microsecond},
		},
	}
	var b bytes.Buffer
	if err := rep.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| `postern run -- true` | 3 | 33.7 | 31.0 | 31.0 | 30.0 | 1.00× |",
		"| `srt -c true` | 3 | 640.0 | 620.0 | 620.0 | 619.0 | 20.00× |",
		"| wall | 1000 | 0.50× | 700 | 900 | +500 | 3.50× |",
		"| `postern run -- true` | 37.0 | 36.5 | 12.33× | 1.19 | 1200 | 250 |",
		"| `bwrap --unshare-net --ro-bind / / true` | 3.0 | 2.5 | 1.00× | 0.75 | 210 | 12 |",
		"| 30.0 ms | **no** |",
		"| 20.0× | yes |",
		"### Measured after a failed first start\n\n- `srt -c true`: its first 1 start(s) failed, then one worked; the first: exit status 1: bridges",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
	rep.Startup[2].Samples = ms(60, 60, 60)
	rep.Startup[3] = StartupResult{Name: startSRT, Command: "srt -c true", Err: "npm install failed"}
	b.Reset()
	rep.Markdown(&b)
	for _, want := range []string{"| 59.0 ms | **no** |", "not measured", "- `srt -c true`: npm install failed"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("failing report lacks %q:\n%s", want, b.String())
		}
	}
	rep.Startup[2].Samples = ms(9, 9, 9)
	b.Reset()
	rep.Markdown(&b)
	if want := "| `postern run -- true` over bare `true` (p50) | ≤ 10.0 ms | 8.0 ms | yes |"; !strings.Contains(b.String(), want) {
		t.Errorf("report within the goal lacks %q:\n%s", want, b.String())
	}
}

// unprivilegedUserns says whether benchUID may make a user namespace here.
func unprivilegedUserns() bool {
	cmd := exec.Command("unshare", "--user", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: benchUID, Gid: benchUID, Groups: []uint32{}}}
	return cmd.Run() == nil
}
