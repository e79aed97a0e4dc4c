package seatbelt

// These tests need a Mac: they run commands under the generated profile with
// the real /usr/bin/sandbox-exec. They send nothing beyond loopback: the only
// other address a command here tries is refused by the sandbox before any
// packet, or by the door's floor.

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/postern-dev/postern/door"
	"github.com/postern-dev/postern/door/event"
	"github.com/postern-dev/postern/door/policy"
)

func TestSeatbeltDeniesAllButTheDoor(t *testing.T) {
	if _, err := os.Stat(SandboxExec); err != nil {
		t.Fatalf("a Mac has %s: %v", SandboxExec, err)
	}
	// A listener on loopback the run must not reach, directly or by name.
	other, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	var reached sync.WaitGroup
	reached.Add(1)
	hits := 0
	go func() {
		defer reached.Done()
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			hits++
			c.Close()
		}
	}()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home, work := filepath.Join(root, "home"), filepath.Join(root, "home", "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".zshrc"), []byte("# mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr := other.Addr().String()
	script := strings.Join([]string{
		`echo ok > written`,
		`(echo evil >> "$HOME/.zshrc") 2>/dev/null; echo $? > zshrc`,
		`(echo evil > "$HOME/.ZPROFILE") 2>/dev/null; echo $? > zprofile`,
		`curl -s -m 5 --noproxy '*' -o /dev/null http://` + addr + `/; echo $? > direct`,
		`curl -s -m 5 -o /dev/null -w '%{http_code}' http://` + addr + `/ > viadoor`,
		`true`,
	}, "; ")
	pol := policy.Nothing()
	w, err := Raise(context.Background(), Spec{Run: "mac", Command: []string{"/bin/sh", "-c", script}, Dir: work, Policy: pol,
		Env: []string{"PATH=/usr/bin:/bin", "HOME=" + home}, Stderr: os.Stderr})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	var mu sync.Mutex
	var events []event.Event
	d, err := door.New(door.Config{Policy: pol, Run: "mac", Emit: func(e event.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx, w.Listeners()) }()
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	code, err := w.Wait()
	stop()
	<-done
	if err != nil || code != 0 {
		t.Fatalf("run = %d, %v", code, err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(work, name))
		return strings.TrimSpace(string(b))
	}
	if read("written") != "ok" {
		t.Error("the run could not write its working directory")
	}
	if read("zshrc") == "0" {
		t.Error("the run appended to ~/.zshrc")
	}
	if read("zprofile") == "0" {
		t.Error("the run created ~/.ZPROFILE (zsh reads it as ~/.zprofile)")
	}
	if b, _ := os.ReadFile(filepath.Join(home, ".zshrc")); string(b) != "# mine\n" {
		t.Errorf("~/.zshrc is now %q", b)
	}
	if read("direct") == "0" {
		t.Error("a direct connection to another loopback port succeeded")
	}
	// Through the door, loopback is on the hard floor.
	if got := read("viadoor"); got != "403" {
		t.Errorf("through the door: HTTP %q, want 403", got)
	}
	other.Close()
	reached.Wait()
	if hits != 0 {
		t.Errorf("the other listener was reached %d times", hits)
	}
	mu.Lock()
	defer mu.Unlock()
	var denied bool
	for _, e := range events {
		denied = denied || e.Event == "decision" && e.Decision == "deny"
	}
	if !denied {
		t.Errorf("the door recorded no denial: %+v", events)
	}
}
