//go:build linux

package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
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

	"github.com/postern-dev/postern/records"
)

// The workspace tests ship a repository of the person's to a remote machine
// (OpenSSH sshd in a test host), and check what the run saw there and what
// came home with git itself.

// posternIn runs the built binary as this controller in dir.
func (c *controller) posternIn(t testing.TB, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binFor(t), args...)
	cmd.Dir = dir
	cmd.Env = c.env()
	return runToEnd(t, cmd)
}

// gitIn runs the machine's git in dir, as the person would, and returns its
// stdout.
func gitIn(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=Person", "GIT_AUTHOR_EMAIL=person@example.test",
		"GIT_COMMITTER_NAME=Person", "GIT_COMMITTER_EMAIL=person@example.test", "GIT_ALLOW_PROTOCOL=file")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %v in %s: %v: %s", args, dir, err, e.String())
	}
	return o.String()
}

func wsWrite(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// newRepo makes a repository under the controller's home with one commit.
func newRepo(t testing.TB, c *controller, rel string) string {
	t.Helper()
	repo := filepath.Join(c.Home, rel)
	if err := os.MkdirAll(repo, 0o755); err != nil {
		t.Fatal(err)
	}
	gitIn(t, repo, "init", "-q", "-b", "main")
	gitIn(t, repo, "config", "user.name", "Person")
	gitIn(t, repo, "config", "user.email", "person@example.test")
	return repo
}

// callerState is everything of the caller's repository a result must not
// touch: HEAD, the index, the config, the hooks, every ref but the result
// branches, and every file of the work tree.
func callerState(t testing.TB, repo string) string {
	t.Helper()
	var b strings.Builder
	head, _ := os.ReadFile(filepath.Join(repo, ".git", "HEAD"))
	fmt.Fprintf(&b, "HEAD %s\n", head)
	for _, f := range []string{"index", "config", "packed-refs"} {
		fmt.Fprintf(&b, "%s %s\n", f, fileHash(filepath.Join(repo, ".git", f)))
	}
	for _, l := range strings.Split(gitIn(t, repo, "for-each-ref", "--format=%(refname) %(objectname)"), "\n") {
		if !strings.HasPrefix(l, "refs/heads/postern/") {
			fmt.Fprintln(&b, l)
		}
	}
	hooks, _ := os.ReadDir(filepath.Join(repo, ".git", "hooks"))
	for _, h := range hooks {
		fmt.Fprintf(&b, "hook %s %s\n", h.Name(), fileHash(filepath.Join(repo, ".git", "hooks", h.Name())))
	}
	b.WriteString(treeListing(t, repo, nil))
	return b.String()
}

func fileHash(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "absent"
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:8])
}

// treeListing lists a work tree (without .git) by type, mode, link target
// and content hash, leaving out the paths in skip.
func treeListing(t testing.TB, root string, skip []string) string {
	t.Helper()
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == ".git" || slices.Contains(skip, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if rel == "." {
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case st.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			lines = append(lines, fmt.Sprintf("link %q -> %q", rel, l))
		case st.IsDir():
			lines = append(lines, fmt.Sprintf("dir %q", rel))
		default:
			lines = append(lines, fmt.Sprintf("file %q %o %s", rel, st.Mode().Perm()&0o111, fileHash(p)))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n") + "\n"
}

// postern's ref changes: the refs under refs/heads/postern/.
func resultBranches(t testing.TB, repo string) []string {
	out := strings.Fields(gitIn(t, repo, "for-each-ref", "--format=%(refname)", "refs/heads/postern/"))
	return out
}

func runRecord(t testing.TB, c *controller, id string) records.Run {
	t.Helper()
	var r records.Run
	if err := json.Unmarshal([]byte(c.mustPostern(t, "runs", "show", id, "--json")), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// workspaceLab is a remote machine, measured, and a repository of the
// person's in a subdirectory of their home.
func workspaceLab(t testing.TB) *remoteLab {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed for workspace tests (apt-get install git): %v", err)
	}
	r := newRemoteLab(t)
	r.addAndProbe(t, "far")
	return r
}

// The copy on the remote has exactly what the person sees: tracked
// changes, deletions, untracked files, executable bits, a symbolic link
// pointing outside the work tree (as a link), names with spaces and a
// newline; ignored files stay home; the run starts in the same
// subdirectory. Its commits and what it left uncommitted come home as
// branch postern/RUN, and nothing else of the caller's repository changes.
func TestWorkspaceRemoteShipsWhatThePersonSees(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "src/proj")
	wsWrite(t, filepath.Join(repo, "README"), "hello\n", 0o644)
	wsWrite(t, filepath.Join(repo, "sub", "code.go"), "package sub\n", 0o644)
	wsWrite(t, filepath.Join(repo, "sub", "run.sh"), "#!/bin/sh\necho run\n", 0o755)
	wsWrite(t, filepath.Join(repo, "to-delete.txt"), "bye\n", 0o644)
	wsWrite(t, filepath.Join(repo, "a b.txt"), "spaces\n", 0o644)
	wsWrite(t, filepath.Join(repo, "new\nline.txt"), "newline\n", 0o644)
	wsWrite(t, filepath.Join(repo, ".gitignore"), ".env\n*.log\n", 0o644)
	gitIn(t, repo, "add", "-A")
	gitIn(t, repo, "commit", "-qm", "base")
	base := strings.TrimSpace(gitIn(t, repo, "rev-parse", "HEAD"))
	// What the person has now, uncommitted.
	wsWrite(t, filepath.Join(repo, "README"), "hello\nchanged at home\n", 0o644)
	if err := os.Remove(filepath.Join(repo, "to-delete.txt")); err != nil {
		t.Fatal(err)
	}
	wsWrite(t, filepath.Join(repo, "sub", "notes.txt"), "untracked\n", 0o644)
	wsWrite(t, filepath.Join(repo, "sub", "code.go"), "package sub\n", 0o755) // executable now
	wsWrite(t, filepath.Join(repo, ".env"), "SECRET=1\n", 0o600)
	wsWrite(t, filepath.Join(repo, "sub", "build.log"), "ignored\n", 0o644)
	if err := os.Symlink("../../../../etc/hostname", filepath.Join(repo, "sub", "outside")); err != nil {
		t.Fatal(err)
	}
	before := callerState(t, repo)
	wantStatus := gitIn(t, repo, "status", "--porcelain", "-z", "--untracked-files=all")

	// The run prints what it sees, makes a commit and leaves a change.
	script := `set -e
date +%s%N > /tmp/started
pwd
git status --porcelain -z --untracked-files=all > /tmp/status
cp /tmp/started ../.started
echo fix > fix.txt
git add fix.txt
git commit -qm "run: fix"
echo "left by the run" >> ../README
sleep 0.2
date +%s%N > ../.ended
`
	stdout, stderr, code := r.C.posternIn(t, filepath.Join(repo, "sub"), "run", "--machine", "far", "--", "sh", "-c", script+`cat /tmp/status >&2`)
	if code != 0 {
		t.Fatalf("run: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	run := lastRun(t, r.C)
	ws := run.Workspace
	if ws == nil || ws.State != records.WorkspaceFetched || !ws.Removed || ws.Base != base || ws.Subdir != "sub" || ws.Commits != 2 || !ws.Descends {
		t.Fatalf("the run's workspace record: %+v", ws)
	}
	if !strings.HasSuffix(strings.TrimSpace(stdout), "/"+run.ID+"/sub") {
		t.Errorf("the run started in %q, want the copy's sub", stdout)
	}
	if !strings.Contains(stderr, wantStatus) {
		t.Errorf("git status in the copy differs from the person's:\nwant %q\nstderr %q", wantStatus, stderr)
	}
	branch := "postern/" + run.ID
	if !strings.Contains(stderr, "result on branch "+branch) || !strings.Contains(stderr, "sub/fix.txt") {
		t.Errorf("run's stderr does not name the branch and its diffstat: %q", stderr)
	}

	// Nothing of the caller's changed but the one new branch.
	if after := callerState(t, repo); after != before {
		t.Fatalf("the caller's repository changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := resultBranches(t, repo); !slices.Equal(got, []string{"refs/heads/" + branch}) {
		t.Fatalf("result branches %v, want only %s", got, branch)
	}
	// The history: the run's commit on the base, then what it left.
	log := gitIn(t, repo, "log", "--format=%s", base+".."+branch)
	if log != "postern: what run "+run.ID+" left uncommitted\nrun: fix\n" {
		t.Fatalf("result history:\n%s", log)
	}
	if p := strings.TrimSpace(gitIn(t, repo, "rev-parse", branch+"~2")); p != base {
		t.Fatalf("the result's history starts at %s, want the base %s", p, base)
	}
	// The result's tree is what the run left: the person's work tree as
	// shipped (modes and links as git records them) plus the run's work.
	check := t.TempDir()
	gitIn(t, repo, "worktree", "add", "-q", "--detach", check, branch)
	defer gitIn(t, repo, "worktree", "remove", "--force", check)
	gotTree := treeListing(t, check, []string{".git", "fix.txt", "sub/fix.txt", ".started", ".ended", "README"})
	wantTreeNoReadme := treeListing(t, repo, []string{".env", "sub/build.log", "README"})
	if gotTree != wantTreeNoReadme {
		t.Errorf("the result's tree is not the person's work tree:\nwant:\n%s\ngot:\n%s", wantTreeNoReadme, gotTree)
	}
	if b, _ := os.ReadFile(filepath.Join(check, "README")); string(b) != "hello\nchanged at home\nleft by the run\n" {
		t.Errorf("README in the result: %q", b)
	}
	if l, err := os.Readlink(filepath.Join(check, "sub", "outside")); err != nil || l != "../../../../etc/hostname" {
		t.Errorf("the link outside the tree came back as %q (%v)", l, err)
	}
	if _, err := os.Stat(filepath.Join(check, ".env")); err == nil {
		t.Errorf("the ignored .env went to the machine and back")
	}

	// The shipping ended before the command started, the fetching began
	// after it ended (the run's own clock, the same machine's).
	started := stampOf(t, check, ".started")
	ended := stampOf(t, check, ".ended")
	if !ws.ShippedAt.Before(started) || !ws.FetchStartedAt.After(ended) {
		t.Errorf("shipped at %v, command started %v, ended %v, fetch began %v: want ship < start, end < fetch", ws.ShippedAt, started, ended, ws.FetchStartedAt)
	}

	// runs show names the branch; runs diff shows the patch.
	show := r.C.mustPostern(t, "runs", "show", run.ID)
	if !strings.Contains(show, branch) {
		t.Errorf("runs show does not name %s:\n%s", branch, show)
	}
	if d := r.C.mustPostern(t, "runs", "diff", run.ID); !strings.Contains(d, "+fix") || !strings.Contains(d, "+left by the run") {
		t.Errorf("runs diff:\n%s", d)
	}
	if d := r.C.mustPostern(t, "runs", "diff", run.ID, "--stat"); !strings.Contains(d, "sub/fix.txt") || !strings.Contains(d, "README") {
		t.Errorf("runs diff --stat:\n%s", d)
	}
	// The remote copy is gone; the cache stays.
	if _, err := os.Stat(filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces", run.ID)); !os.IsNotExist(err) {
		t.Errorf("the remote copy is still there: %v", err)
	}
	caches, _ := filepath.Glob(filepath.Join(r.Remote.Home, ".cache", "postern", "workspaces", "r-*.git"))
	if len(caches) != 1 {
		t.Fatalf("caches on the remote: %v", caches)
	}

	// A second run after a one-file change sends no history, only the
	// changed files.
	// Its copy is the first run's, reset: nothing of what that run left.
	wsWrite(t, filepath.Join(repo, "sub", "notes.txt"), "untracked, changed\n", 0o644)
	wantStatus = gitIn(t, repo, "status", "--porcelain", "-z", "--untracked-files=all")
	stdout, stderr, code = r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "cat sub/notes.txt; git status --porcelain -z --untracked-files=all >&2")
	if code != 0 || stdout != "untracked, changed\n" || !strings.HasPrefix(anyStartLineRE.ReplaceAllString(stderr, ""), wantStatus) {
		t.Fatalf("second run: exit %d, stdout %q, stderr %s", code, stdout, stderr)
	}
	second := lastRun(t, r.C).Workspace
	if second.Bundled != 0 || second.Shipped > 64<<10 || second.State != records.WorkspaceUnchanged {
		t.Fatalf("second run's workspace: %+v; want no history sent, a small snapshot, nothing changed", second)
	}
	if !strings.Contains(stderr, "changed nothing") {
		t.Errorf("a run that changed nothing does not say so: %q", stderr)
	}
	if got := resultBranches(t, repo); len(got) != 1 {
		t.Errorf("a run that changed nothing made a branch: %v", got)
	}
}

func stampOf(t testing.TB, dir, name string) time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(0, ns)
}

// An empty repository, a detached HEAD, and submodules (refused, before
// anything runs).
func TestWorkspaceRemoteEdgeRepositories(t *testing.T) {
	r := workspaceLab(t)

	t.Run("empty repository", func(t *testing.T) {
		repo := newRepo(t, r.C, "empty")
		wsWrite(t, filepath.Join(repo, "first.txt"), "first\n", 0o644)
		stdout, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "cat first.txt; git symbolic-ref HEAD; echo second > second.txt")
		if code != 0 || stdout != "first\nrefs/heads/main\n" {
			t.Fatalf("exit %d, stdout %q, stderr %s", code, stdout, stderr)
		}
		run := lastRun(t, r.C)
		branch := "postern/" + run.ID
		if got := gitIn(t, repo, "ls-tree", "-r", "--name-only", branch); got != "first.txt\nsecond.txt\n" {
			t.Fatalf("result tree %q", got)
		}
		if n := strings.TrimSpace(gitIn(t, repo, "rev-list", "--count", branch)); n != "1" {
			t.Fatalf("result has %s commits, want 1", n)
		}
		if _, err := os.Stat(filepath.Join(repo, "second.txt")); err == nil {
			t.Fatal("the run's file reached the caller's work tree")
		}
	})

	t.Run("detached head", func(t *testing.T) {
		repo := newRepo(t, r.C, "detached")
		wsWrite(t, filepath.Join(repo, "f"), "1\n", 0o644)
		gitIn(t, repo, "add", "f")
		gitIn(t, repo, "commit", "-qm", "one")
		wsWrite(t, filepath.Join(repo, "f"), "2\n", 0o644)
		gitIn(t, repo, "commit", "-qam", "two")
		gitIn(t, repo, "checkout", "-q", "--detach", "HEAD~1")
		base := strings.TrimSpace(gitIn(t, repo, "rev-parse", "HEAD"))
		stdout, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--keep-workspace", "--", "sh", "-c", "git rev-parse HEAD; git symbolic-ref -q HEAD || echo detached; cat f; echo 3 > f")
		if code != 0 || stdout != base+"\ndetached\n1\n" {
			t.Fatalf("exit %d, stdout %q, want %s detached; stderr %s", code, stdout, base, stderr)
		}
		// --keep-workspace: the result is home and the copy stays, listed.
		run := lastRun(t, r.C)
		if got := gitIn(t, repo, "show", "postern/"+run.ID+":f"); got != "3\n" {
			t.Fatalf("f in the result: %q", got)
		}
		kept := filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces", run.ID, "f")
		if b, err := os.ReadFile(kept); err != nil || string(b) != "3\n" {
			t.Fatalf("the kept copy's f: %q %v", b, err)
		}
		if show := r.C.mustPostern(t, "machine", "show", "far"); !strings.Contains(show, run.ID) {
			t.Fatalf("machine show does not list the kept copy:\n%s", show)
		}
	})

	t.Run("submodules are refused", func(t *testing.T) {
		lib := newRepo(t, r.C, "lib")
		wsWrite(t, filepath.Join(lib, "l"), "l\n", 0o644)
		gitIn(t, lib, "add", "l")
		gitIn(t, lib, "commit", "-qm", "lib")
		repo := newRepo(t, r.C, "withsub")
		gitIn(t, repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", lib, "lib")
		gitIn(t, repo, "commit", "-qm", "with a submodule")
		marker := filepath.Join(r.Remote.Home, "ran")
		_, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "touch", marker)
		if code == 0 || !strings.Contains(stderr, "submodules") || !strings.Contains(stderr, "--workspace none") {
			t.Fatalf("a repository with submodules: exit %d, stderr %q; want a refusal naming submodules and --workspace none", code, stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the command ran")
		}
	})

	t.Run("outside a work tree nothing is shipped", func(t *testing.T) {
		dir := filepath.Join(r.C.Home, "plain")
		wsWrite(t, filepath.Join(dir, "x"), "x\n", 0o644)
		stdout, _, code := r.C.posternIn(t, dir, "run", "--machine", "far", "--", "sh", "-c", "ls")
		if code != 0 || strings.Contains(stdout, "x") {
			t.Fatalf("exit %d, stdout %q: want the remote's own empty directory", code, stdout)
		}
		if lastRun(t, r.C).Workspace != nil {
			t.Fatal("a run outside a work tree has a workspace")
		}
		// --workspace DIR ships it.
		stdout, _, code = r.C.posternIn(t, r.C.Home, "run", "--machine", "far", "--workspace", dir, "--", "cat", "x")
		if code != 0 || stdout != "x\n" {
			t.Fatalf("--workspace DIR: exit %d, stdout %q", code, stdout)
		}
	})
}

// A run that plants hooks, changes .git/config (a filter and a file system
// monitor that would run a command), adds refs and tags and rewrites
// history yields only its branch: its rewritten history, marked as not
// descending from the base. It runs with an open network, so nothing of
// the wall holds its writes back: what holds is how the result is made and
// taken home.
func TestWorkspaceHostileRunYieldsOnlyItsBranch(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	base := strings.TrimSpace(gitIn(t, repo, "rev-parse", "HEAD"))
	before := callerState(t, repo)
	markers := filepath.Join(t.TempDir(), "markers")
	if err := os.MkdirAll(markers, 0o777); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
M=%q
G="git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c filter.evil.clean=cat -c filter.evil.smudge=cat"
for h in pre-commit post-commit post-checkout reference-transaction post-merge pre-push; do
  printf '#!/bin/sh\ntouch %%s/hook-%%s\n' "$M" "$h" > .git/hooks/$h; chmod +x .git/hooks/$h
done
printf '#!/bin/sh\ntouch %%s/fsmonitor\n' "$M" > /tmp/fsmon; chmod +x /tmp/fsmon
git config core.fsmonitor /tmp/fsmon
git config filter.evil.clean "touch $M/filter-clean; cat"
git config filter.evil.smudge "touch $M/filter-smudge; cat"
git config core.hooksPath .git/hooks
echo '* filter=evil' > .gitattributes
$G commit -qm other --allow-empty
$G branch other
$G tag evil
$G tag -a -m evil evil-annotated
$G checkout -q --orphan rewritten
$G commit -qm "history rewritten"
echo uncommitted > g
# Whatever ran so far ran during the run: only what runs after it counts.
rm -f "$M"/*
`, markers)
	stdout, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--egress-open", "testing a hostile run", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("hostile run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	run := lastRun(t, r.C)
	branch := "postern/" + run.ID
	if after := callerState(t, repo); after != before {
		t.Fatalf("the caller's repository changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got := resultBranches(t, repo); !slices.Equal(got, []string{"refs/heads/" + branch}) {
		t.Fatalf("result branches %v", got)
	}
	if tags := gitIn(t, repo, "tag", "-l"); tags != "" {
		t.Fatalf("the run's tags reached the caller: %q", tags)
	}
	if ents, _ := os.ReadDir(markers); len(ents) != 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("the run's hooks, filters or monitor ran after it ended: %v", names)
	}
	ws := run.Workspace
	if ws.Descends || !strings.Contains(stderr, "does not descend from the base") {
		t.Fatalf("rewritten history not marked: descends=%v stderr %q", ws.Descends, stderr)
	}
	if ok, _ := exec.Command("git", "-C", repo, "merge-base", "--is-ancestor", base, branch).CombinedOutput(); len(ok) != 0 {
		t.Fatalf("merge-base said %s", ok)
	}
	if got := gitIn(t, repo, "log", "--format=%s", branch); got != "postern: what run "+run.ID+" left uncommitted\nhistory rewritten\n" {
		t.Fatalf("result history %q", got)
	}
	// The commit only the run's other branch holds never came.
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", "refs/heads/other").Run(); err == nil {
		t.Fatal("the run's other branch reached the caller")
	}
	// The next run of the repository, in the hostile run's copy reset,
	// finds none of it: its hooks, its config, its files.
	stdout, stderr, code = r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c",
		"git status --porcelain --untracked-files=all; ls -A; ls .git/hooks | grep -v sample; git config --local --list | grep -c evil")
	if code != 1 || stdout != ".git\nf\n0\n" {
		t.Fatalf("the run after a hostile one: exit %d, stdout %q (want a clean copy: .git and f, no evil config), stderr %s", code, stdout, stderr)
	}
	if ents, _ := os.ReadDir(markers); len(ents) != 0 {
		t.Fatalf("something the hostile run planted ran in the next run's shipping: %v", ents)
	}
}

// A result over --max-result is refused with a message naming the limit
// and kept on the machine (machine show lists it); runs fetch with a
// higher limit brings it home, and the copy is then removed.
func TestWorkspaceResultLimitAndFetchLater(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	_, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--max-result", "100000", "--",
		"sh", "-c", "head -c 600000 /dev/urandom > big.bin")
	if code != 0 || !strings.Contains(stderr, "over the limit of 100000 bytes") || !strings.Contains(stderr, "--max-result") {
		t.Fatalf("over the limit: exit %d, stderr %q", code, stderr)
	}
	run := lastRun(t, r.C)
	if got := resultBranches(t, repo); len(got) != 0 {
		t.Fatalf("a refused result made %v", got)
	}
	if show := r.C.mustPostern(t, "machine", "show", "far"); !strings.Contains(show, run.ID) {
		t.Fatalf("machine show does not list the kept copy of %s:\n%s", run.ID, show)
	}
	out := r.C.mustPostern(t, "runs", "fetch", run.ID, "--max-result", "10000000")
	if !strings.Contains(out, "postern/"+run.ID) {
		t.Fatalf("runs fetch: %s", out)
	}
	big := gitIn(t, repo, "cat-file", "-s", "postern/"+run.ID+":big.bin")
	if strings.TrimSpace(big) != "600000" {
		t.Fatalf("big.bin in the result is %s bytes", big)
	}
	if show := r.C.mustPostern(t, "machine", "show", "far"); strings.Contains(show, run.ID) {
		t.Fatalf("machine show still lists %s once fetched:\n%s", run.ID, show)
	}
	if _, err := os.Stat(filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces", run.ID)); !os.IsNotExist(err) {
		t.Fatalf("the copy is still on the machine: %v", err)
	}
}

// The connection cut while the result is fetched: no ref is written, the
// copy stays, and runs fetch brings the whole result home.
func TestWorkspaceFetchCutThenRetried(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	before := callerState(t, repo)
	outgoing := filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces", ".outgoing-*", "result.bundle")
	stop := make(chan struct{})
	cut := make(chan bool, 1)
	go func() {
		// Cut every ssh session as soon as the result's bundle is being
		// made or sent.
		for {
			select {
			case <-stop:
				cut <- false
				return
			default:
			}
			if m, _ := filepath.Glob(outgoing); len(m) > 0 {
				for _, pid := range sshdTree(r.Remote.cmd.Process.Pid)[1:] {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				cut <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	_, stderr, _ := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "head -c 30000000 /dev/urandom > big.bin")
	close(stop)
	if !<-cut {
		t.Fatalf("the fetch was never seen to start; stderr %q", stderr)
	}
	run := lastRun(t, r.C)
	if !strings.Contains(stderr, "did not come home") || run.Workspace.State != records.WorkspaceKept {
		t.Fatalf("cut fetch: stderr %q, workspace %+v", stderr, run.Workspace)
	}
	if got := resultBranches(t, repo); len(got) != 0 {
		t.Fatalf("a cut fetch left %v", got)
	}
	if after := callerState(t, repo); after != before {
		t.Fatalf("a cut fetch changed the caller's repository")
	}
	r.C.mustPostern(t, "runs", "fetch", run.ID)
	if s := strings.TrimSpace(gitIn(t, repo, "cat-file", "-s", "postern/"+run.ID+":big.bin")); s != "30000000" {
		t.Fatalf("big.bin came home as %s bytes", s)
	}
}

// The machine's disk full: shipping fails with a message that says so, and
// nothing runs.
func TestWorkspaceRemoteDiskFull(t *testing.T) {
	r := workspaceLab(t)
	cache := filepath.Join(r.Remote.Home, ".cache", "postern", "workspaces")
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	// In sshd's mount namespace (ip netns exec made it one of its own),
	// where the remote's sessions see it.
	ns := strconv.Itoa(r.Remote.cmd.Process.Pid)
	if out, err := exec.Command("nsenter", "-t", ns, "-m", "mount", "-t", "tmpfs", "-o", "size=1m", "postern-test-full", cache).CombinedOutput(); err != nil {
		t.Fatalf("mount a small tmpfs for the remote's cache: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("nsenter", "-t", ns, "-m", "umount", "-l", cache).Run() })
	repo := newRepo(t, r.C, "proj")
	rnd := make([]byte, 3<<20)
	_, _ = rand.Read(rnd)
	wsWrite(t, filepath.Join(repo, "random.bin"), string(rnd), 0o644)
	gitIn(t, repo, "add", "random.bin")
	gitIn(t, repo, "commit", "-qm", "3 MB of noise")
	marker := filepath.Join(r.Remote.Home, "ran")
	_, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "touch", marker)
	if code == 0 || !strings.Contains(stderr, "disk is full") {
		t.Fatalf("disk full: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran")
	}
	if got := resultBranches(t, repo); len(got) != 0 {
		t.Fatalf("branches %v", got)
	}
}

// The caller's repository changes while the run works: a commit, another
// branch checked out, a file edited. The result branch is still made, from
// the base the run started on, and the caller's new work is untouched.
func TestWorkspaceCallerChangesMeanwhile(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	base := strings.TrimSpace(gitIn(t, repo, "rev-parse", "HEAD"))
	marker := filepath.Join(r.Remote.Home, "started")
	done := make(chan struct{})
	var stderr string
	var code int
	go func() {
		defer close(done)
		_, stderr, code = r.C.posternIn(t, repo, "run", "--machine", "far", "--egress-open", "a marker for the test", "--",
			"sh", "-c", "touch "+marker+"; sleep 2; echo run > run.txt")
	}()
	waitUntil(t, 60*time.Second, "the run to start", func() bool { _, err := os.Stat(marker); return err == nil })
	gitIn(t, repo, "checkout", "-q", "-b", "elsewhere")
	wsWrite(t, filepath.Join(repo, "f"), "meanwhile\n", 0o644)
	gitIn(t, repo, "commit", "-qam", "meanwhile")
	wsWrite(t, filepath.Join(repo, "f"), "editing\n", 0o644)
	wsWrite(t, filepath.Join(repo, "mine.txt"), "mine\n", 0o644)
	gitIn(t, repo, "add", "mine.txt")
	mid := callerState(t, repo)
	<-done
	if code != 0 {
		t.Fatalf("run: exit %d, stderr %q", code, stderr)
	}
	run := lastRun(t, r.C)
	branch := "postern/" + run.ID
	if after := callerState(t, repo); after != mid {
		t.Fatalf("the caller's work changed:\nbefore:\n%s\nafter:\n%s", mid, after)
	}
	if p := strings.TrimSpace(gitIn(t, repo, "rev-parse", branch+"^")); p != base {
		t.Fatalf("result's parent %s, want the base %s", p, base)
	}
	if got := gitIn(t, repo, "show", branch+":run.txt"); got != "run\n" {
		t.Fatalf("run.txt in the result: %q", got)
	}
}

// Local runs in fresh copies (--workspace copy), side by side: neither sees
// the other's work, and each comes home as its own branch.
func TestWorkspaceLocalCopies(t *testing.T) {
	c := newController(t)
	if _, _, code := c.postern(t, "machine", "probe-confinement"); code != 0 {
		t.Fatal("probe local")
	}
	repo := newRepo(t, c, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	wsWrite(t, filepath.Join(repo, "wip.txt"), "wip\n", 0o644)
	before := callerState(t, repo)
	type res struct {
		out, err string
		code     int
	}
	results := make(chan res, 2)
	for _, name := range []string{"one", "two"} {
		go func() {
			o, e, code := c.posternIn(t, repo, "run", "--workspace", "copy", "--", "sh", "-c",
				"sleep 1; ls; echo "+name+" > "+name+".txt; git add -A; git commit -qm "+name)
			results <- res{o, e, code}
		}()
	}
	for range 2 {
		r := <-results
		if r.code != 0 || r.out != "f\nwip.txt\n" {
			t.Fatalf("local copy run: exit %d, stdout %q (want only f and wip.txt: no other run's file), stderr %s", r.code, r.out, r.err)
		}
	}
	if after := callerState(t, repo); after != before {
		t.Fatalf("the caller's work changed:\n%s\n%s", before, after)
	}
	branches := resultBranches(t, repo)
	if len(branches) != 2 {
		t.Fatalf("branches %v", branches)
	}
	var files []string
	for _, b := range branches {
		files = append(files, strings.TrimSpace(gitIn(t, repo, "ls-tree", "--name-only", b)))
	}
	slices.Sort(files)
	if files[0] != "f\none.txt\nwip.txt" || files[1] != "f\ntwo.txt\nwip.txt" {
		t.Fatalf("results: %q", files)
	}

	// A relative command the copy lacks (ignored, so never shipped) is
	// looked up in the copy, not at home: not found, 127, and no branch.
	wsWrite(t, filepath.Join(repo, ".gitignore"), "tool\n", 0o644)
	wsWrite(t, filepath.Join(repo, "tool"), "#!/bin/sh\necho ran at home\n", 0o755)
	o, e, code := c.posternIn(t, repo, "run", "--workspace", "copy", "--", "./tool")
	if code != 127 || strings.Contains(o, "ran at home") || !strings.Contains(e, "not found") {
		t.Fatalf("an ignored relative command in a copy: exit %d, stdout %q, stderr %s; want 127, not found", code, o, e)
	}
	if got := resultBranches(t, repo); len(got) != 2 {
		t.Fatalf("branches after the command not found: %v", got)
	}
	if run := lastRun(t, c); run.End != records.EndNotFound {
		t.Fatalf("the run ended %q (exit %v), want %q: postern's own finding, before any wall", run.End, run.ExitCode, records.EndNotFound)
	}
}

// The connection cut while the work is shipped: the run fails saying so,
// its command never starts, no half copy is left behind, and the next run
// ships again and works.
func TestWorkspaceShipCutThenRunAgain(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	rnd := make([]byte, 20<<20)
	_, _ = rand.Read(rnd)
	wsWrite(t, filepath.Join(repo, "noise.bin"), string(rnd), 0o644)
	gitIn(t, repo, "add", "noise.bin")
	gitIn(t, repo, "commit", "-qm", "20 MB of noise")
	runs := filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces")
	incoming := filepath.Join(runs, ".incoming-*", "history.bundle")
	stop := make(chan struct{})
	cut := make(chan bool, 1)
	go func() {
		for {
			select {
			case <-stop:
				cut <- false
				return
			default:
			}
			if m, _ := filepath.Glob(incoming); len(m) > 0 {
				for _, pid := range sshdTree(r.Remote.cmd.Process.Pid)[1:] {
					syscall.Kill(pid, syscall.SIGKILL)
				}
				cut <- true
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	marker := filepath.Join(r.Remote.Home, "ran")
	_, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "touch", marker)
	close(stop)
	if !<-cut {
		t.Fatalf("the shipment was never seen; exit %d, stderr %q", code, stderr)
	}
	if code == 0 || !strings.Contains(stderr, "ship the work to machine far") {
		t.Fatalf("cut shipment: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran after a cut shipment")
	}
	// The agent, its session gone, removes what it had made.
	waitUntil(t, 15*time.Second, "the half copy to be removed", func() bool {
		ents, _ := os.ReadDir(runs)
		return len(ents) == 0
	})
	sum := sha256.Sum256(rnd)
	if out, stderr, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "sha256sum noise.bin"); code != 0 || !strings.HasPrefix(out, hex.EncodeToString(sum[:])) {
		t.Fatalf("the run after: exit %d, stdout %q, stderr %q; want the noise's sha256", code, out, stderr)
	}
}

// A run lost mid-way (its connection cut): its copy stays on the machine,
// machine show lists it, and runs fetch brings home what it had done.
func TestWorkspaceLostRunFetchedLater(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	copies := filepath.Join(r.Remote.Home, ".local", "share", "postern", "workspaces", "*", "partial.txt")
	done := make(chan struct{})
	var stderr string
	var code int
	go func() {
		defer close(done)
		_, stderr, code = r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "echo partial > partial.txt; sleep 60")
	}()
	waitUntil(t, 60*time.Second, "the run to write partial.txt", func() bool { m, _ := filepath.Glob(copies); return len(m) == 1 })
	for _, pid := range sshdTree(r.Remote.cmd.Process.Pid)[1:] {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	<-done
	run := lastRun(t, r.C)
	if code == 0 || run.State != records.StateLost || run.Workspace.State != records.WorkspaceKept {
		t.Fatalf("lost run: exit %d, state %s, workspace %+v, stderr %q", code, run.State, run.Workspace, stderr)
	}
	if show := r.C.mustPostern(t, "machine", "show", "far"); !strings.Contains(show, run.ID) {
		t.Fatalf("machine show does not list the lost run's copy:\n%s", show)
	}
	r.C.mustPostern(t, "runs", "fetch", run.ID)
	if got := gitIn(t, repo, "show", "postern/"+run.ID+":partial.txt"); got != "partial\n" {
		t.Fatalf("partial.txt in the lost run's result: %q", got)
	}
}

// Two remote runs of one repository at once share its cache and never a
// work tree: each comes home as its own branch.
func TestWorkspaceRemoteRunsSideBySide(t *testing.T) {
	r := workspaceLab(t)
	repo := newRepo(t, r.C, "proj")
	wsWrite(t, filepath.Join(repo, "f"), "base\n", 0o644)
	gitIn(t, repo, "add", "f")
	gitIn(t, repo, "commit", "-qm", "base")
	type res struct {
		out, err string
		code     int
	}
	results := make(chan res, 3)
	for _, name := range []string{"one", "two", "three"} {
		go func() {
			o, e, code := r.C.posternIn(t, repo, "run", "--machine", "far", "--", "sh", "-c", "sleep 1; ls; echo "+name+" > "+name+".txt")
			results <- res{o, e, code}
		}()
	}
	for range 3 {
		x := <-results
		if x.code != 0 || x.out != "f\n" {
			t.Fatalf("side by side: exit %d, stdout %q (want only f), stderr %s", x.code, x.out, x.err)
		}
	}
	var trees []string
	for _, b := range resultBranches(t, repo) {
		trees = append(trees, strings.Join(strings.Fields(gitIn(t, repo, "ls-tree", "--name-only", b)), " "))
	}
	slices.Sort(trees)
	if !slices.Equal(trees, []string{"f one.txt", "f three.txt", "f two.txt"}) {
		t.Fatalf("results: %q", trees)
	}
}

// anyStartLineRE is postern's start line for a run on any machine.
var anyStartLineRE = regexp.MustCompile(`(?m)^postern: run \S+ on \S+ \([^)]*\)\n`)
