package seatbelt

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/postern-dev/postern/door/policy"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// fixture is a home with a project repository, another repository, a linked
// work tree and a directory whose name needs escaping, under one root that
// the golden files show as $ROOT.
type fixture struct {
	root, home, proj, other, linked, odd, plain string
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{root: root, home: filepath.Join(root, "home", "me")}
	f.proj = filepath.Join(f.home, "src", "proj")
	f.other = filepath.Join(f.home, "src", "other")
	f.linked = filepath.Join(f.home, "src", "proj-feature")
	f.odd = filepath.Join(f.home, `it's a "quoted" dir\with a backslash`, "work")
	f.plain = filepath.Join(root, "scratch")
	for _, d := range []string{f.proj, f.other, f.odd, f.plain, filepath.Join(f.home, ".ssh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+f.home, "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	git(f.proj, "init", "-q", "-b", "main")
	git(f.proj, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
	git(f.proj, "worktree", "add", "-q", "-b", "feature", f.linked)
	git(f.other, "init", "-q")
	git(f.odd, "init", "-q")
	return f
}

// placesFor is PlacesFor with the fixture's home and a run temporary
// directory under the root.
func (f fixture) placesFor(t *testing.T, dir string) Places {
	t.Helper()
	tmp := filepath.Join(f.root, "tmp", "postern-run-1")
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	return PlacesFor(PlacesSpec{
		Dir:           dir,
		Home:          f.home,
		Temp:          []string{tmp, filepath.Join(f.root, "tmp")},
		NeverWritable: []string{filepath.Join(f.home, ".local", "state", "postern"), filepath.Join(f.home, ".postern-agent")},
	})
}

func mustParse(t *testing.T, name, src string) *policy.Policy {
	t.Helper()
	p, err := policy.Parse(name, []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to write it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("profile differs from %s (go test -update rewrites it after a deliberate change):\n%s", path, lineDiff(string(want), got))
	}
}

func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for i := 0; i < max(len(w), len(g)); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			fmt.Fprintf(&b, "line %d:\n  want %s\n  got  %s\n", i+1, wl, gl)
		}
	}
	return b.String()
}

func TestProfileGolden(t *testing.T) {
	f := newFixture(t)
	enforce := mustParse(t, "enforce.hcl", `allow = ["github.com", "registry.npmjs.org"]`)
	observe := mustParse(t, "observe.hcl", `mode = "observe"`+"\n"+`allow = ["github.com"]`)
	ports := mustParse(t, "ports.hcl", `ports = [443, 8443, 9418]`+"\n"+`allow = ["example.com:8443"]`)
	cases := []struct {
		name string
		pol  *policy.Policy
		dir  string
		port uint16
	}{
		{"enforce-repo", enforce, f.proj, 41234},
		{"observe-repo", observe, f.proj, 41234},
		{"ports-repo-subdir", ports, filepath.Join(f.proj, "sub", "dir"), 52001},
		{"linked-worktree", enforce, f.linked, 41234},
		{"quoted-dir", enforce, f.odd, 41234},
		{"no-repo", policy.Nothing(), f.plain, 1080},
	}
	profiles := map[string]string{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.MkdirAll(tc.dir, 0o755); err != nil {
				t.Fatal(err)
			}
			got, err := Profile(ProfileSpec{Run: "20260101-000000-abcdef", Policy: tc.pol, DoorPort: tc.port, Places: f.placesFor(t, tc.dir)})
			if err != nil {
				t.Fatal(err)
			}
			checkProfile(t, got, tc.port)
			// The directories above the root depend on where the test runs:
			// their lines are left out.
			for a := filepath.Dir(f.root); a != "/"; a = filepath.Dir(a) {
				q, _ := Quote(pathRegex(a, false)[0])
				got = strings.ReplaceAll(got, "  (regex "+q+")\n", "")
			}
			got = strings.ReplaceAll(got, f.root, "$ROOT")
			// The regular expressions spell the root in both cases.
			got = foldedRoot(f.root).ReplaceAllLiteralString(got, "$ROOT")
			profiles[tc.name] = got
			golden(t, tc.name, got)
		})
	}
	// Observe mode opens nothing more: what does not pass the door is not
	// recorded, so the two profiles differ only in the header naming the
	// policy.
	e, o := strings.Split(profiles["enforce-repo"], "\n"), strings.Split(profiles["observe-repo"], "\n")
	if len(e) != len(o) {
		t.Fatalf("enforce and observe profiles have %d and %d lines", len(e), len(o))
	}
	for i := range e {
		if e[i] != o[i] && !strings.HasPrefix(e[i], "; policy ") {
			t.Errorf("enforce and observe profiles differ beyond the header at line %d:\n  %s\n  %s", i+1, e[i], o[i])
		}
	}
}

// foldedRoot matches root as pathRegex spells it, with the regular
// expression's escapes doubled by Quote.
func foldedRoot(root string) *regexp.Regexp {
	re := pathRegex(root, false)[0]
	re = strings.TrimSuffix(strings.TrimPrefix(re, "^"), "$")
	q, _ := Quote(re)
	return regexp.MustCompile(regexp.QuoteMeta(strings.Trim(q, `"`)))
}

// checkProfile reads the profile back and checks what every run's profile
// must say: deny by default, outbound network to the door's port alone, no
// Mach service that would be a way around the door, and the guarded paths
// after the writable ones.
func checkProfile(t *testing.T, prof string, port uint16) {
	t.Helper()
	forms, err := readSBPL(prof)
	if err != nil {
		t.Fatalf("profile does not read back: %v\n%s", err, prof)
	}
	if len(forms) < 2 || forms[0].list[0].atom != "version" || forms[1].list[0].atom != "deny" || forms[1].list[1].atom != "default" {
		t.Fatalf("profile does not start (version 1) (deny default)")
	}
	var outbound []string
	lastAllowWrite, firstDenyWrite := -1, -1
	for i, f := range forms {
		if len(f.list) < 2 {
			continue
		}
		verb, ops := f.list[0].atom, f.list[1:]
		for _, op := range ops {
			switch {
			case op.atom == "network-outbound" && verb == "allow":
				outbound = append(outbound, render(f))
			case op.atom == "network*" || op.atom == "default" && verb == "allow":
				t.Errorf("profile opens %s", render(f))
			case op.atom == "file-write*" && verb == "allow" && len(f.list) > 2 && f.list[2].list != nil && f.list[2].list[0].atom == "subpath":
				lastAllowWrite = i
			case op.atom == "file-write*" && verb == "deny" && firstDenyWrite < 0:
				firstDenyWrite = i
			case op.atom == "mach-lookup" && verb == "allow":
				for _, n := range f.list[2:] {
					if n.list == nil || n.list[1].str == nil {
						continue
					}
					name := *n.list[1].str
					for _, bad := range []string{"mDNSResponder", "nsurlsessiond", "networkd", "ocspd", "launchservicesd", "lsd.", "cfprefsd", "SecurityServer", "xpc.smd"} {
						if strings.Contains(name, bad) {
							t.Errorf("profile allows the Mach service %s", name)
						}
					}
				}
			}
		}
	}
	want := []string{
		`(allow network-outbound (remote ip "localhost:` + strconv.Itoa(int(port)) + `"))`,
		`(allow network-outbound (literal "/private/var/run/syslog"))`,
	}
	var unixOut int
	for _, o := range outbound {
		if strings.Contains(o, "remote unix-socket") {
			unixOut++
			continue
		}
		if !slices.Contains(want, o) {
			t.Errorf("profile allows outbound %s", o)
		}
	}
	if unixOut != 1 {
		t.Errorf("profile allows unix sockets in %d places, want the run's own temporary directory alone", unixOut)
	}
	if lastAllowWrite < 0 || firstDenyWrite < lastAllowWrite {
		t.Errorf("the guarded paths (form %d) do not come after the writable ones (form %d): later rules win", firstDenyWrite, lastAllowWrite)
	}
}

func render(e sexp) string {
	switch {
	case e.str != nil:
		q, _ := Quote(*e.str)
		return q
	case e.list != nil:
		parts := make([]string, len(e.list))
		for i, x := range e.list {
			parts[i] = render(x)
		}
		return "(" + strings.Join(parts, " ") + ")"
	}
	return e.atom
}

func TestPlaces(t *testing.T) {
	f := newFixture(t)
	pl := f.placesFor(t, filepath.Join(f.linked))
	mustHave := func(list []string, what string, paths ...string) {
		t.Helper()
		for _, p := range paths {
			if !slices.Contains(list, p) {
				t.Errorf("%s lacks %s; has %q", what, p, list)
			}
		}
	}
	common := filepath.Join(f.proj, ".git")
	wtGitDir := filepath.Join(common, "worktrees", "proj-feature")
	mustHave(pl.Writable, "writable", f.linked, wtGitDir, common, f.home, filepath.Join(f.root, "tmp"))
	mustHave(pl.Guarded, "guarded",
		filepath.Join(common, "config"), filepath.Join(common, "hooks"), filepath.Join(common, "commondir"), filepath.Join(common, "info"),
		filepath.Join(wtGitDir, "config.worktree"), filepath.Join(wtGitDir, "commondir"),
		filepath.Join(f.other, ".git", "config"), filepath.Join(f.other, ".git", "hooks"),
		filepath.Join(f.linked, ".envrc"),
		filepath.Join(f.home, ".ssh"), filepath.Join(f.home, ".zshenv"), filepath.Join(f.home, "Library", "LaunchAgents"),
		filepath.Join(f.home, ".local", "state", "postern"), filepath.Join(f.home, ".postern-agent"))
	if len(pl.Sockets) != 1 || pl.Sockets[0] != filepath.Join(f.root, "tmp", "postern-run-1") {
		t.Errorf("sockets %q, want the run's own temporary directory alone", pl.Sockets)
	}

	// A symbolic link to the work tree is made real: the sandbox matches the
	// paths the kernel sees.
	link := filepath.Join(f.root, "link")
	if err := os.Symlink(f.proj, link); err != nil {
		t.Fatal(err)
	}
	pl = f.placesFor(t, link)
	mustHave(pl.Writable, "writable through a link", f.proj)
	if slices.Contains(pl.Writable, link) {
		t.Errorf("writable holds the link %s, not the real path", link)
	}

	// A repository at / or around the home is the machine's: only the
	// working directory is the run's.
	pl = PlacesFor(PlacesSpec{Dir: filepath.Join(f.home, "notes"), Home: f.home})
	if slices.Contains(pl.Writable, "/") {
		t.Errorf("writable holds /: %q", pl.Writable)
	}
}

func TestProfileRefusesUnquotablePaths(t *testing.T) {
	_, err := Profile(ProfileSpec{DoorPort: 1, Places: Places{Writable: []string{"/Users/me/a\nb"}}})
	if err == nil || !strings.Contains(err.Error(), "control character") || !strings.Contains(err.Error(), "writable directory") {
		t.Fatalf("err = %v, want a refusal naming the writable directory", err)
	}
	if _, err := Profile(ProfileSpec{}); err != ErrNoDoorPort {
		t.Fatalf("no port: %v", err)
	}
}

func TestProfileCommentsCannotBecomeRules(t *testing.T) {
	pol := mustParse(t, "x\n(allow default)\n.hcl", `name = "n"`)
	got, err := Profile(ProfileSpec{Run: "r\n(allow network*)", Policy: pol, DoorPort: 9})
	if err != nil {
		t.Fatal(err)
	}
	forms, err := readSBPL(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range forms {
		if s := render(f); s == "(allow default)" || s == "(allow network*)" {
			t.Fatalf("a name in a comment became the rule %s", s)
		}
	}
}
