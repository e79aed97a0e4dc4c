package workspace

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/postern-dev/postern/remote-agent/agent"
)

func testGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	c := exec.Command("git", args...)
	c.Dir = dir
	c.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=T", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=T", "GIT_COMMITTER_EMAIL=t@example.test")
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	if err := c.Run(); err != nil {
		t.Fatalf("git %v: %v: %s", args, err, e.String())
	}
	return strings.TrimSpace(o.String())
}

// A run that committed: collect keeps the shipped index's stat for the
// files the run left alone (so it hashes only what it changed), and the
// bundle it sends, imported by git at home, is the run's commit on top of
// its own commit of what was left uncommitted, file for file.
func TestCollectAfterCommitsKeepsShippedIndex(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed")
	}
	ctx := context.Background()
	p := Places{Runs: t.TempDir()}
	id := "20261202-005040-8957b3"
	run, err := p.RunDir(id)
	if err != nil {
		t.Fatal(err)
	}
	testGit(t, p.Runs, "init", "-q", run)
	for i := range 20 {
		if err := os.WriteFile(filepath.Join(run, fmt.Sprintf("f%02d", i)), []byte(fmt.Sprintf("file %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testGit(t, run, "add", ".")
	testGit(t, run, "commit", "-qm", "base")
	base := testGit(t, run, "rev-parse", "HEAD")
	home := filepath.Join(t.TempDir(), "home")
	testGit(t, p.Runs, "clone", "-q", run, home)

	// As shipping leaves it: the index of the copy, and its tree.
	tmp := t.TempDir()
	tree, err := shippedTree(ctx, run, tmp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "shipped-index"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.indexFile(id), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.shippedFile(id), []byte(tree+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The run: two commits changing f00, then f01 changed and g added,
	// neither committed.
	for i := range 2 {
		if err := os.WriteFile(filepath.Join(run, "f00"), []byte(fmt.Sprintf("changed %d\n", i)), 0o644); err != nil {
			t.Fatal(err)
		}
		testGit(t, run, "commit", "-qam", fmt.Sprintf("run %d", i))
	}
	if err := os.WriteFile(filepath.Join(run, "f01"), []byte("uncommitted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(run, "g"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head := testGit(t, run, "rev-parse", "HEAD")

	// The index is seeded from the shipped one, not made again.
	g := git{dir: run, clean: true, env: []string{"GIT_DIR=" + filepath.Join(run, ".git"), "GIT_WORK_TREE=" + run, "GIT_INDEX_FILE=" + filepath.Join(tmp, "seed")}}
	kept, err := seedIndex(ctx, g, filepath.Join(tmp, "seed"), p.indexFile(id), head)
	if err != nil || !kept {
		t.Fatalf("seeding from the shipped index after the run's commits: kept %v, %v", kept, err)
	}

	var out bytes.Buffer
	res, err := Collect(ctx, p, agent.WorkspaceRequest{RunID: id, Base: base}, &out)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Size != int64(out.Len()) {
		t.Fatalf("result %+v, %d bytes sent", res, out.Len())
	}
	h, err := ParseBundleHeader(bytes.NewReader(out.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Refs) != 1 || h.Refs[0].Name != resultRef || h.Refs[0].SHA != res.Result || len(h.Prerequisites) != 1 || h.Prerequisites[0] != base {
		t.Fatalf("bundle header %+v, result %s, base %s", h, res.Result, base)
	}
	bundle := filepath.Join(t.TempDir(), "result.bundle")
	if err := os.WriteFile(bundle, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	// git's own check of the bundle against the home repository.
	testGit(t, home, "bundle", "verify", "-q", bundle)
	imp, err := Import(ctx, home, id, base, res, bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !imp.Descends || imp.Commits != 3 {
		t.Fatalf("imported %+v, want 3 commits on top of the base", imp)
	}
	if got := testGit(t, home, "rev-parse", imp.Branch+"^"); got != head {
		t.Fatalf("the result's parent is %s, the run's HEAD %s", got, head)
	}
	for _, f := range []string{"f00", "f01", "f02", "g"} {
		want, err := os.ReadFile(filepath.Join(run, f))
		if err != nil {
			t.Fatal(err)
		}
		if got := testGit(t, home, "show", imp.Branch+":"+f); got != strings.TrimSpace(string(want)) {
			t.Errorf("%s in the result is %q, in the run's copy %q", f, got, want)
		}
	}
	if err := testGitOK(home, "fsck", "--no-dangling", "--connectivity-only"); err != nil {
		t.Fatal(err)
	}
}

func testGitOK(dir string, args ...string) error {
	c := exec.Command("git", args...)
	c.Dir = dir
	if out, err := c.CombinedOutput(); err != nil {
		return fmt.Errorf("git %v: %v: %s", args, err, out)
	}
	return nil
}
