package container

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/testhosts"
)

// testDir holds what the tests build and what Raise remembers; it is made on
// first use (fuzz workers never need it) and TestMain removes it.
var (
	testDirOnce sync.Once
	testDirPath string
	testDirErr  error
)

func testDir() string {
	testDirOnce.Do(func() { testDirPath, testDirErr = os.MkdirTemp("", "postern-container-test-") })
	if testDirErr != nil {
		panic(testDirErr)
	}
	return testDirPath
}

func TestMain(m *testing.M) {
	// What Raise remembers about engines stays with the tests.
	rememberPath = func() string { return filepath.Join(testDir(), "container-engines.json") }
	code := m.Run()
	if testDirPath != "" {
		os.RemoveAll(testDirPath)
	}
	os.Exit(code)
}

var (
	harnessOnce sync.Once
	harnessPath string
	harnessErr  error
)

// harnessBin is postern built statically, once, for the tests that start
// containers: the test binary itself is linked dynamically and would not run
// inside a busybox image.
func harnessBin(t *testing.T) string {
	t.Helper()
	harnessOnce.Do(func() {
		harnessPath = filepath.Join(testDir(), "postern")
		build := exec.Command("go", "build", "-o", harnessPath, "github.com/postern-dev/postern/cmd/postern")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			harnessErr = fmt.Errorf("build a static postern: %v\n%s", err, out)
		}
	})
	if harnessErr != nil {
		t.Fatal(harnessErr)
	}
	return harnessPath
}

// skipOrFail skips with why, or fails when POSTERN_REQUIRE_PRIVILEGED=1.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("POSTERN_REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("%s (POSTERN_REQUIRE_PRIVILEGED=1 forbids skipping)", why)
	}
	t.Skip(why)
}

var (
	podmanOnce sync.Once
	podmanEng  *Engine
	podmanErr  error
)

// requirePodman needs root and a podman that runs containers.
func requirePodman(t *testing.T) *Engine {
	t.Helper()
	testhosts.RequireRoot(t)
	podmanOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		podmanEng, podmanErr = Detect(ctx, Podman)
	})
	if podmanErr != nil {
		skipOrFail(t, fmt.Sprintf("needs podman: %v", podmanErr))
	}
	return podmanEng
}

var (
	busyboxOnce sync.Once
	busyboxRef  string
	busyboxErr  error
)

// busyboxPath is Debian's busybox-static.
const busyboxPath = "/bin/busybox"

// busyboxApplets are linked in the test image's /bin.
var busyboxApplets = []string{"sh", "cat", "echo", "sleep", "true", "false", "nc", "wget", "tftp", "nslookup", "ip", "ls", "kill", "ps", "id", "env", "hostname"}

// busyboxImage is an image of static busybox imported into e, shared by tests.
func busyboxImage(t *testing.T, e *Engine) string {
	t.Helper()
	if _, err := os.Stat(busyboxPath); err != nil {
		skipOrFail(t, fmt.Sprintf("needs busybox-static (%s): %v", busyboxPath, err))
	}
	busyboxOnce.Do(func() {
		files := append(ProbeFiles(), ImageFile{Path: "bin/busybox", Source: busyboxPath, Mode: 0o755})
		for _, a := range busyboxApplets {
			files = append(files, ImageFile{Path: "bin/" + a, Link: "busybox"})
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		busyboxRef, busyboxErr = BuildImage(ctx, e, "postern-test-busybox", files)
	})
	if busyboxErr != nil {
		t.Fatal(busyboxErr)
	}
	return busyboxRef
}
