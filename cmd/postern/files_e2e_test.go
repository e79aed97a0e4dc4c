//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/postern-dev/postern/internal/kernel"
	"github.com/postern-dev/postern/internal/testhosts"
)

// Red-team tests of the wall's filesystem through the built binary: each
// performs from inside a run what issue 10 found to work, then checks the
// host as the person would meet it afterwards (their git, their next login,
// their next python, their records, their next run).

// treeSums maps each path below root to what it is (testhosts.TreeSums),
// leaving out what cannot be read.
func treeSums(t *testing.T, root string) map[string]string {
	t.Helper()
	out, _ := testhosts.TreeSums(root)
	return out
}

// unchanged reports every difference between two treeSums.
func unchanged(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	for _, c := range testhosts.TreeChanges(before, after) {
		t.Errorf("%s on the host: %s", what, c)
	}
}

// personHome is a home as a person has one: startup files, git's and ssh's
// configuration, a config directory.
func personHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	for name, body := range map[string]string{
		".bashrc":                     "# the person's\n[ -f ~/.bash_aliases ] && . ~/.bash_aliases\n",
		".profile":                    "# the person's\n",
		".gitconfig":                  "[user]\n\tname = person\n\temail = person@example.test\n",
		".config/systemd/user/.keep":  "",
		".ssh/id_ed25519":             "-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n",
		".ssh/known_hosts":            "example.test ssh-ed25519 AAAA\n",
		".local/share/applications/x": "",
	} {
		p := filepath.Join(home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

func hostGit(t *testing.T, dir, home string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(curlEnv(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestWallNothingARunWritesIsObeyedOnTheHost(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	p := poster{Home: measuredHome(t), Dir: filepath.Join(t.TempDir(), "repo"), Env: []string{"HOME=" + home, "GIT_CONFIG_NOSYSTEM=1"}}
	if out, err := hostGit(t, filepath.Dir(p.Dir), home, "init", "-q", p.Dir); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	if err := os.WriteFile(filepath.Join(p.Dir, "README"), []byte("work\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := hostGit(t, p.Dir, home, "add", "README"); err != nil {
		t.Fatal(out)
	}
	if out, err := hostGit(t, p.Dir, home, "commit", "-qm", "start"); err != nil {
		t.Fatal(out)
	}
	homeBefore := treeSums(t, home)
	gitDir := filepath.Join(p.Dir, ".git")
	obeyedBefore := map[string]string{}
	for k, v := range treeSums(t, gitDir) {
		if k == "config" || k == "hooks" || strings.HasPrefix(k, "hooks/") || strings.HasPrefix(k, "info") {
			obeyedBefore[k] = v
		}
	}
	marker := filepath.Join(t.TempDir(), "RAN")
	w := p.run(t, nil, fmt.Sprintf(`set -e
		echo change >> README && git add README && git -c user.name=run -c user.email=run@example.test commit -qm "the run's"
		echo 'touch %[1]s' > "$HOME/.bash_aliases"
		mkdir -p "$HOME/.local/bin" && printf '#!/bin/sh\ntouch %[1]s\n' > "$HOME/.local/bin/git" && chmod +x "$HOME/.local/bin/git"
		mkdir -p "$HOME/.local/lib/python3.11/site-packages" && echo 'import os; os.system("touch %[1]s")' > "$HOME/.local/lib/python3.11/site-packages/evil.pth"
		mkdir -p "$HOME/.aws" && printf '[default]\ncredential_process = touch %[1]s\n' > "$HOME/.aws/config"
		mv "$HOME/.config" "$HOME/.config.old"
		mkdir -p "$HOME/.config/systemd/user" && printf '[Service]\nExecStart=touch %[1]s\n' > "$HOME/.config/systemd/user/evil.service"
		echo 'alias ls="touch %[1]s"' >> "$HOME/.bashrc"
		printf '[core]\n\tfsmonitor = "touch %[1]s"\n' >> .git/config
		printf '#!/bin/sh\ntouch %[1]s\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout
		mkdir -p /tmp/other && git init -q --bare /tmp/other && printf '[core]\n\tfsmonitor = "touch %[1]s"\n' >> /tmp/other/config
		echo /tmp/other > .git/commondir
		echo '* filter=evil' > .git/info/attributes
		echo "== done"`, marker))
	if w.Code != 0 {
		t.Fatalf("run: %s", w)
	}
	// The person's git: the run's commit is there, and nothing it planted runs.
	if got, err := hostGit(t, p.Dir, home, "log", "-1", "--format=%s"); err != nil || got != "the run's" {
		t.Errorf("the host's git log: %q, %v; want the run's commit", got, err)
	}
	for _, args := range [][]string{{"status"}, {"checkout", "-q", "-b", "next"}, {"diff", "HEAD~1"}} {
		if out, err := hostGit(t, p.Dir, home, args...); err != nil {
			t.Errorf("git %v on the host after the run: %v\n%s", args, err, out)
		}
	}
	obeyedAfter := map[string]string{}
	for k, v := range treeSums(t, gitDir) {
		if k == "config" || k == "hooks" || strings.HasPrefix(k, "hooks/") || strings.HasPrefix(k, "info") {
			obeyedAfter[k] = v
		}
	}
	unchanged(t, ".git", obeyedBefore, obeyedAfter)
	if _, err := os.Stat(filepath.Join(gitDir, "commondir")); err == nil {
		t.Error(".git/commondir reached the host")
	}
	// The person's next login shell and python, with the run's home as it is.
	login := exec.Command("bash", "--login", "-i", "-c", "command -v git; ls >/dev/null")
	login.Env = []string{"HOME=" + home, "PATH=" + home + "/.local/bin:/usr/local/bin:/usr/bin:/bin", "TERM=dumb"}
	login.Dir = home
	if out, err := login.CombinedOutput(); err != nil || !strings.Contains(string(out), "/usr/bin/git") {
		t.Errorf("a login shell after the run: %v\n%s", err, out)
	}
	if py, err := exec.LookPath("python3"); err == nil {
		cmd := exec.Command(py, "-c", "pass")
		cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
		cmd.Run()
	}
	if _, err := os.Stat(marker); err == nil {
		t.Errorf("something the run planted ran on the host")
	}
	unchanged(t, "the home", homeBefore, treeSums(t, home))
	// Said to the person and kept in the record.
	for _, want := range []string{"discarded " + filepath.Join(gitDir, "config") + ": git obeys it",
		"discarded " + filepath.Join(gitDir, "hooks", "post-checkout"), "discarded " + filepath.Join(gitDir, "commondir"),
		"file(s) it wrote in the home outside its writable places", "were discarded; --keep-home keeps them"} {
		if !strings.Contains(w.Stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, w.Stderr)
		}
	}
	if len(w.Run.Writes) < 4 {
		t.Errorf("the run record's writes: %q", w.Run.Writes)
	}
	if show := p.exec(t, "runs", "show", w.Run.ID); !regexp.MustCompile(`(?m)^writes +discarded ` + regexp.QuoteMeta(filepath.Join(gitDir, "commondir"))).MatchString(show.Stdout) {
		t.Errorf("runs show does not say what was discarded:\n%s", show.Stdout)
	}
}

func TestWallRefusesWorkingDirectoriesThatAreNotProjects(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	state := measuredHome(t)
	planted := "/etc/postern-planted-" + randHex(4)
	for _, c := range []struct {
		dir, home, want string
	}{
		{"/", home, "working directory /: / is the whole machine"},
		{"/etc", home, "working directory /etc: /etc is the system's (/etc)"},
		{home, home, "working directory " + home + ": it is the home"},
		{filepath.Dir(home), home, "it contains the home " + home},
		{filepath.Join(home, ".config"), home, "it contains ~/.config/fish"},
		{t.TempDir(), "/", "home /: HOME=/: / is the whole machine"},
	} {
		p := poster{Home: state, Dir: c.dir, Env: []string{"HOME=" + c.home}}
		r := p.exec(t, "run", "--", "touch", planted)
		if r.Code == 0 || !strings.Contains(r.Stderr, c.want) || !strings.Contains(r.Stderr, "fix: ") {
			t.Errorf("postern run in %s with HOME=%s: exit %d, stderr %q; want a refusal saying %q and the fix", c.dir, c.home, r.Code, r.Stderr, c.want)
		}
	}
	if _, err := os.Stat(planted); err == nil {
		os.Remove(planted)
		t.Errorf("a refused run wrote %s", planted)
	}
}

func TestWallLeavesNoSetuidFile(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	// A directory the unprivileged user can reach, as a shared one would be.
	dir := testhosts.OpenDir(t, "postern-setuid-")
	p := poster{Home: measuredHome(t), Dir: dir}
	w := p.run(t, nil, step("cp", "cp /bin/sh ./s")+step("chmod", "chmod 4755 ./s")+step("setgid", "chmod 2755 ./s")+
		step("install", "install -m 4755 /bin/sh ./i")+step("dir", "mkdir -m 2775 ./d"))
	if rc(t, w.Out(t, "cp")) != 0 {
		t.Fatalf("run: %s", w)
	}
	for _, st := range []string{"chmod", "setgid", "install", "dir"} {
		if out := w.Out(t, st); rc(t, out) == 0 || !strings.Contains(out, "Operation not permitted") {
			t.Errorf("%s: a setid mode was not refused:\n%s", st, out)
		}
	}
	// On the host, an unprivileged user gets no euid 0 from what the run left.
	filepath.WalkDir(p.Dir, func(f string, d fs.DirEntry, err error) error {
		if info, err := d.Info(); err == nil && info.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
			t.Errorf("%s is %v on the host", f, info.Mode())
		}
		return nil
	})
	cmd := exec.Command(filepath.Join(p.Dir, "s"), "-p", "-c", "id -u")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: testhosts.Nobody, Gid: testhosts.Nobody}}
	out, err := cmd.CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != strconv.Itoa(testhosts.Nobody) {
		t.Errorf("./s -p as uid %d on the host: %q, %v; want uid %d", testhosts.Nobody, out, err, testhosts.Nobody)
	}
}

func TestWallRecordsAreOutOfTheRunsReach(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	state := filepath.Join(home, ".local", "state", "postern") // the default place, under the home
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(measuredHome(t), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "records.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	inWork := filepath.Join(work, "state")
	if err := os.MkdirAll(inWork, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(inWork, "records.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, pc := range []struct {
		name string
		p    poster
	}{
		{"under the home", poster{Home: state, Dir: work, Env: []string{"HOME=" + home}}},
		{"in the working directory", poster{Home: inWork, Dir: work, Env: []string{"HOME=" + home}}},
	} {
		p := pc.p
		before := p.exec(t, "machine", "show", "local", "--json").Stdout
		// In subshells: sh leaves a script whose redirection of : fails.
		w := p.run(t, nil, step("truncate", `(: > "$POSTERN_HOME/records.db")`)+
			step("rewrite", `(echo '{}' > "$POSTERN_HOME/records.db")`)+
			step("remove", `rm -rf "$POSTERN_HOME"; ls -A "$POSTERN_HOME" | wc -l`)+
			step("read", `wc -c < "$POSTERN_HOME/records.db"`))
		for _, st := range []string{"truncate", "rewrite"} {
			if rc(t, w.Out(t, st)) == 0 {
				t.Errorf("%s: the run could %s records.db", pc.name, st)
			}
		}
		if out := w.Out(t, "read"); regexp.MustCompile(`(?m)^[1-9][0-9]*$`).MatchString(out) {
			t.Errorf("%s: the run read records.db: %q", pc.name, out)
		}
		// The records are whole: the machine's measurement, and this run.
		if after := p.exec(t, "machine", "show", "local", "--json").Stdout; after != before || !strings.Contains(after, `"carry": "network-wall"`) {
			t.Errorf("%s: the machine's record changed:\n%s\nwas\n%s", pc.name, after, before)
		}
		if w.Run.State != "exited" || len(p.runs(t)) != 1 {
			t.Errorf("%s: the records after the run: %+v, %d runs", pc.name, w.Run, len(p.runs(t)))
		}
		// And the next run starts at once.
		if r := p.exec(t, "run", "--", "true"); r.Code != 0 || r.Took > 10*time.Second {
			t.Errorf("%s: the next run: exit %d after %s: %s", pc.name, r.Code, r.Took, r.Stderr)
		}
	}
}

func TestWallWritablePlacesAndKeepHome(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	state := measuredHome(t)
	p := poster{Home: state, Dir: t.TempDir(), Env: []string{"HOME=" + home}}
	pol := writeFile(t, "files-policy.hcl", `writable = ["~/.claude", "~/.claude.json", "~/agent-cache"]
deny_read = ["~/.config/systemd"]
`)
	w := p.run(t, []string{"--policy", pol, "--keep-home"},
		step("agent", `mkdir -p "$HOME/.claude/projects" && echo s > "$HOME/.claude/projects/1" && echo '{"a":1}' > "$HOME/.claude.json.new" && mv "$HOME/.claude.json.new" "$HOME/.claude.json"`)+
			step("cache", `mkdir -p "$HOME/agent-cache" && echo c > "$HOME/agent-cache/x"`)+
			step("other", `echo o > "$HOME/other"`)+
			step("masked", `ls -A "$HOME/.config/systemd" | wc -l`)+
			step("ssh", `cat "$HOME/.ssh/id_ed25519" | wc -c; cat "$HOME/.ssh/known_hosts"`))
	if w.Code != 0 || rc(t, w.Out(t, "agent")) != 0 || rc(t, w.Out(t, "cache")) != 0 {
		t.Fatalf("run: %s", w)
	}
	for f, want := range map[string]string{".claude/projects/1": "s\n", ".claude.json": `{"a":1}` + "\n", "agent-cache/x": "c\n"} {
		if b, err := os.ReadFile(filepath.Join(home, f)); err != nil || string(b) != want {
			t.Errorf("~/%s on the host: %q %v; want %q", f, b, err, want)
		}
	}
	if _, err := os.Stat(filepath.Join(home, "other")); err == nil {
		t.Error("a file outside the writable places reached the home")
	}
	if out := w.Out(t, "masked"); !strings.Contains(out, "\n0\n") {
		t.Errorf("a deny_read directory of the policy is readable: %q", out)
	}
	if out := w.Out(t, "ssh"); !strings.Contains(out, "\n0\n") || !strings.Contains(out, "example.test ssh-ed25519") {
		t.Errorf("ssh's private key should be masked and known_hosts not: %q", out)
	}
	kept := filepath.Join(state, "kept", w.Run.ID)
	if !strings.Contains(w.Stderr, "were kept in "+kept) {
		t.Errorf("stderr does not say where the home was kept (%s):\n%s", kept, w.Stderr)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "home", "other")); err != nil || string(b) != "o\n" {
		t.Errorf("the kept home's file: %q %v", b, err)
	}
}

// TestWallPidsLimit: a fork bomb inside a run stops at the run's limit, the
// host still forks, and the next run starts.
func TestWallPidsLimit(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	p := poster{Home: measuredHome(t), Dir: t.TempDir()}
	// bash retries a fork the kernel refuses, so the bomb stays at the
	// limit; the counting uses builtins only, for the same reason. pid 1 is
	// the wall's, on top of the run's limit: it is not counted.
	w := p.run(t, []string{"--pids-limit", "64"}, `exec bash -c '
		bomb() { bomb | bomb & }
		bomb 2>/dev/null
		SECONDS=0; while [ $SECONDS -lt 2 ]; do :; done
		n=0; for q in /proc/[0-9]*; do [ "$q" = /proc/1 ] || n=$((n+1)); done
		echo "== procs"; echo "$n"
		kill -9 -1 2>/dev/null; exit 0'`)
	n, err := strconv.Atoi(strings.TrimSpace(w.Out(t, "procs")))
	if err != nil || n > 64 || n < 16 {
		t.Errorf("the bomb had %q processes with --pids-limit 64 (%v)\n%s", w.Out(t, "procs"), err, w)
	}
	if out, err := exec.Command("true").CombinedOutput(); err != nil {
		t.Errorf("the host cannot fork after the run: %v %s", err, out)
	}
	if r := p.exec(t, "run", "--", "true"); r.Code != 0 || r.Took > 10*time.Second {
		t.Errorf("the next run: exit %d after %s: %s", r.Code, r.Took, r.Stderr)
	}
	// The default limit, where the host's only pids hierarchy is cgroup v1
	// and its kernel has a pid_max of each pid namespace's own: the run's
	// pid namespace numbers its tasks up to the limit and the 300 the kernel
	// keeps below once they wrap (and a few for the init), and the run
	// cannot raise it.
	if onlyCgroupV1Pids(t) && kernel.AtLeast(6, 14) {
		w := p.run(t, nil, `cat /proc/sys/kernel/pid_max; echo 99999 > /proc/sys/kernel/pid_max 2>/dev/null && echo RAISED; cat /proc/sys/kernel/pid_max`)
		got := strings.Fields(w.Stdout)
		n, err := strconv.Atoi(strings.Join(got[:min(1, len(got))], ""))
		if len(got) != 2 || err != nil || n < 4096+300 || n > 4096+300+64 || got[1] != got[0] {
			t.Errorf("the run's pid_max, then after it tried to raise it: %q, want a little over 4396, twice\n%s", w.Stdout, w)
		}
	}
	// The least limit still runs a pipeline: the init's spare threads are
	// not the run's share.
	if w := p.run(t, []string{"--pids-limit", "16"}, `echo a | cat | cat | cat`); w.Code != 0 || strings.TrimSpace(w.Stdout) != "a" {
		t.Errorf("a pipeline under --pids-limit 16: exit %d, %q\n%s", w.Code, w.Stdout, w)
	}
	if r := p.exec(t, "run", "--pids-limit", "3", "--", "true"); r.Code != 2 || !strings.Contains(r.Stderr, "--pids-limit 3: give at least 16") {
		t.Errorf("--pids-limit 3: exit %d, %q", r.Code, r.Stderr)
	}
}

// TestWallStartsWhereDotGitBlocks: a .git in the home that is a link to
// /proc/kmsg (whose read waits for the kernel) once made every run hang in
// the home's repository search; the search is gone, and a run started below
// it reads it without waiting.
func TestWallStartsWhereDotGitBlocks(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	a := filepath.Join(home, "a")
	if err := os.MkdirAll(filepath.Join(a, "work"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/kmsg", filepath.Join(a, ".git")); err != nil {
		t.Fatal(err)
	}
	state := measuredHome(t)
	for _, dir := range []string{filepath.Join(a, "work"), t.TempDir()} {
		p := poster{Home: state, Dir: dir, Env: []string{"HOME=" + home}}
		if r := p.exec(t, "run", "--", "true"); r.Code != 0 || r.Took > 5*time.Second {
			t.Errorf("run in %s with ~/a/.git -> /proc/kmsg: exit %d after %s: %s", dir, r.Code, r.Took, r.Stderr)
		}
	}
}

// TestRemoteRunsWriteByAllowList performs the same attempts in runs on a
// machine reached over OpenSSH's sshd, where the agent raises the wall: the
// remote home's writes stay private (or are kept there when asked), the
// agent that runs the next run outside the wall cannot be replaced, and no
// setuid file is left.
func TestRemoteRunsWriteByAllowList(t *testing.T) {
	testhosts.EndToEnd(t)
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	agents := agentFiles(t, r.Remote.Home)
	if len(agents) != 1 {
		t.Fatalf("installed agents: %v", agents)
	}
	agentSum := sha256File(t, agents[0])
	homeBefore := treeSums(t, r.Remote.Home)
	agentDir := filepath.Dir(agents[0])
	run := func(args ...string) (string, string, int) {
		return r.C.postern(t, append([]string{"run", "--machine", "far", "--"}, args...)...)
	}

	stdout, stderr, code := run("sh", "-c", fmt.Sprintf(`
		pwd
		echo 'curl evil.test' > "$HOME/.bash_profile"; echo 'curl evil.test' > "$HOME/.bash_aliases"
		mkdir -p "$HOME/.local/bin" && echo '#!/bin/sh' > "$HOME/.local/bin/git"
		(cp /bin/sh %[1]s/postern) 2>/dev/null && echo AGENT-REPLACED
		(printf '#!/bin/sh\nexec true\n' > %[1]s/postern) 2>/dev/null && echo AGENT-WRITTEN
		ls -A %[1]s | wc -l
		cp /bin/sh ./s && chmod 4755 ./s; echo "chmod=$?"`, agentDir))
	if code != 0 {
		t.Fatalf("remote run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	t.Logf("remote run:\n%s%s", stdout, stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	runDir := lines[0]
	if !strings.HasPrefix(runDir, filepath.Join(r.Remote.Home, ".local", "share", "postern", "runs")+"/") {
		t.Errorf("the remote run worked in %s, want a directory of its own under ~/.local/share/postern/runs", runDir)
	}
	if strings.Contains(stdout, "AGENT-") || !strings.Contains(stdout, "\n0\nchmod=1") {
		t.Errorf("inside the remote run the agent's directory was reachable, or a setuid file made:\n%s", stdout)
	}
	if got := sha256File(t, agents[0]); got != agentSum {
		t.Errorf("the remote agent changed: sha256 %s, was %s", got, agentSum)
	}
	after := treeSums(t, r.Remote.Home)
	for p := range after {
		// What the agent and the run's own directory may add.
		if strings.HasPrefix(p, ".local/share/postern/runs") || strings.HasPrefix(p, ".cache/postern") || p == ".local/share/postern" || p == ".local/share" || p == ".local" {
			delete(after, p)
		}
	}
	for p := range homeBefore {
		if strings.HasPrefix(p, ".cache/postern") {
			delete(homeBefore, p)
		}
	}
	unchanged(t, "the remote home", homeBefore, after)
	if st, err := os.Stat(filepath.Join(runDir, "s")); err != nil || st.Mode()&os.ModeSetuid != 0 {
		t.Errorf("the run's ./s on the remote: %v %v; want it there, not setuid", st, err)
	}
	if !strings.Contains(stderr, "file(s) it wrote in the home outside its writable places") {
		t.Errorf("the person was not told the remote home's writes were discarded:\n%s", stderr)
	}

	// The next run starts the same agent, which still runs walls.
	if o, e, code := run("echo", "next"); code != 0 || o != "next\n" {
		t.Fatalf("the next remote run: exit %d, %q, %q", code, o, e)
	}
	if got := agentFiles(t, r.Remote.Home); len(got) != 1 || sha256File(t, got[0]) != agentSum {
		t.Errorf("the agent after the next run: %v", got)
	}

	// --keep-home keeps the remote home's writes on the remote, and says where.
	_, stderr, code = r.C.postern(t, "run", "--machine", "far", "--keep-home", "--", "sh", "-c", `echo kept > "$HOME/notes"`)
	id := lastRun(t, r.C).ID
	kept := filepath.Join(r.Remote.Home, ".local", "state", "postern", "kept", id)
	if code != 0 || !strings.Contains(stderr, "were kept in "+kept+" on machine far") {
		t.Fatalf("--keep-home on the remote: exit %d, stderr %q; want it kept in %s", code, stderr, kept)
	}
	if b, err := os.ReadFile(filepath.Join(kept, "home", "notes")); err != nil || string(b) != "kept\n" {
		t.Errorf("the kept remote home's notes: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(r.Remote.Home, "notes")); err == nil {
		t.Error("the kept write reached the remote home itself")
	}
}

// TestWallRefusesAWritablePlaceOverTheRecords: a writable entry that would
// hold POSTERN_HOME, where it only shows at run time, is refused with its
// position, before anything is spawned.
func TestWallRefusesAWritablePlaceOverTheRecords(t *testing.T) {
	testhosts.EndToEnd(t)
	testhosts.RequireRoot(t)
	t.Parallel()
	home := personHome(t)
	state := filepath.Join(home, "agent-data", "postern")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(measuredHome(t), "records.db"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(state, "records.db"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	pol := writeFile(t, "over-records.hcl", "writable = [\"~/agent-data\"]\n")
	p := poster{Home: state, Dir: t.TempDir(), Env: []string{"HOME=" + home}}
	r := p.exec(t, "run", "--policy", pol, "--", "true")
	want := pol + `:1:13: network wall: writable entry "~/agent-data" ` + filepath.Join(home, "agent-data") + ": a run may never write " + state
	if r.Code != 2 || !strings.Contains(r.Stderr, want) {
		t.Errorf("exit %d, stderr %q; want exit 2 and %q", r.Code, r.Stderr, want)
	}
}

// onlyCgroupV1Pids says whether this machine's pids controller is on a cgroup
// v1 hierarchy (then none is on v2).
func onlyCgroupV1Pids(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[0] != "0" && slices.Contains(strings.Split(parts[1], ","), "pids") {
			return true
		}
	}
	return false
}
