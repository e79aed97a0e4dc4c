package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestParseFiles(t *testing.T) {
	src := `writable   = ["~/.claude", "/srv/cache/build", "~/.config/myagent"]
deny_read  = ["~/.config/vendor/*.token"]
allow_read = ["~/.kube/config"]
pids_limit = 512
`
	p, err := Parse("f.hcl", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	want := []PathRule{{"~/.claude", "f.hcl:1:15"}, {"/srv/cache/build", "f.hcl:1:28"}, {"~/.config/myagent", "f.hcl:1:48"}}
	if !slices.Equal(p.Writable, want) {
		t.Errorf("writable = %+v, want %+v", p.Writable, want)
	}
	if len(p.DenyRead) != len(DefaultDenyRead)+1 || p.DenyRead[len(p.DenyRead)-1] != (PathRule{"~/.config/vendor/*.token", "f.hcl:2:15"}) {
		t.Errorf("deny_read = %+v: want the defaults and the policy's entry", p.DenyRead)
	}
	if !slices.Contains(p.AllowRead, PathRule{"~/.kube/config", "f.hcl:3:15"}) || !slices.Contains(p.AllowRead, PathRule{Text: "~/.ssh/*.pub"}) {
		t.Errorf("allow_read = %+v: want the defaults and the policy's entry", p.AllowRead)
	}
	if p.PidsLimit != 512 {
		t.Errorf("pids_limit = %d", p.PidsLimit)
	}
}

func TestParseFilesDefaults(t *testing.T) {
	for name, p := range map[string]*Policy{"nothing": Nothing(), "empty": mustParse(t, "# nothing\n")} {
		if !slices.Equal(p.Writable, DefaultWritable) || !slices.Equal(p.DenyRead, DefaultDenyRead) ||
			!slices.Equal(p.AllowRead, DefaultAllowRead) || p.PidsLimit != DefaultPidsLimit {
			t.Errorf("%s: writable %v deny_read %v allow_read %v pids_limit %d: want the defaults", name, p.Writable, p.DenyRead, p.AllowRead, p.PidsLimit)
		}
	}
	if p := mustParse(t, "writable = []\n"); len(p.Writable) != 0 {
		t.Errorf("writable = [] kept %v", p.Writable)
	}
	// Every default passes the checks a policy's own entries get.
	for _, r := range DefaultWritable {
		if s, d := pathProblem("writable", r.Text, false); s != "" {
			t.Errorf("default writable %q: %s; %s", r.Text, s, d)
		}
	}
	for _, r := range append(slices.Clone(DefaultDenyRead), DefaultAllowRead...) {
		if s, d := pathProblem("deny_read", r.Text, true); s != "" {
			t.Errorf("default %q: %s; %s", r.Text, s, d)
		}
	}
}

func TestParseFilesErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{"home", `writable = ["~"]`, []string{`p.hcl:1:13: writable entry "~" may not be written by a run; it is the home itself`, `"~/.claude"`}},
		{"home slash", `writable = ["~/"]`, []string{`writable entry "~/" may not be written by a run; it is the home itself`}},
		{"startup file", `writable = ["~/.claude", "~/.bashrc"]`,
			[]string{`p.hcl:1:26: writable entry "~/.bashrc" may not be written by a run; ~/.bashrc is a shell's startup file, which programs outside the wall obey; list only the agent's own state`}},
		{"aliases", `writable = ["~/.bash_aliases"]`, []string{"sourced by Debian's .bashrc"}},
		{"parent of git config", `writable = ["~/.config"]`, []string{`writable entry "~/.config" may not be written by a run; it contains ~/.config/fish`, `"~/.config/<agent>"`}},
		{"inside ssh", `writable = ["~/.ssh/keys"]`, []string{`it lies in ~/.ssh, ssh's keys and configuration`}},
		{"local bin", `writable = ["~/.local"]`, []string{`it contains ~/.local/share/systemd`}},
		{"postern home", `writable = ["~/.local/state"]`, []string{`it contains ~/.local/state/postern, postern's records (POSTERN_HOME)`}},
		{"agents", `writable = ["~/.cache/postern/agents"]`, []string{`it lies in ~/.cache/postern, postern's agents`}},
		{"aws", `writable = ["~/.aws"]`, []string{"credential_process runs"}},
		{"site-packages", `writable = ["~/.local/lib/python3.11/site-packages"]`, []string{`it lies in ~/.local/lib`}},
		{"root", `writable = ["/"]`, []string{`p.hcl:1:13: writable entry "/" is a system place; / is the whole machine`}},
		{"etc", `writable = ["/etc/cron.d"]`, []string{`writable entry "/etc/cron.d" is a system place; /etc/cron.d is the system's (/etc)`}},
		{"usr", `writable = ["/usr/local/lib/python3/dist-packages"]`, []string{"is the system's (/usr)"}},
		{"home dir", `writable = ["/home"]`, []string{"/home is a directory of the system's, which holds others' files"}},
		{"tmp", `writable = ["/tmp"]`, []string{"/tmp is a directory of the system's"}},
		{"relative", `writable = [".claude"]`, []string{`a path is absolute or starts with ~/ (the home): "~/.claude"`}},
		{"dollar home", `writable = ["$HOME/.claude"]`, []string{`write the home as ~: "~/.claude"`}},
		{"dotdot", `writable = ["~/.claude/../.bashrc"]`, []string{"without .."}},
		{"wildcard writable", `writable = ["~/.cache/*"]`, []string{"writable entries name places, without wildcards"}},
		{"bad glob", `deny_read = ["~/.ssh/[x"]`, []string{`p.hcl:1:14: invalid deny_read entry "~/.ssh/[x"`, "malformed"}},
		{"empty", `deny_read = [""]`, []string{"p.hcl:1:14: empty deny_read entry"}},
		{"spaces", `allow_read = [" ~/.kube/config"]`, []string{`remove the spaces around it: "~/.kube/config"`}},
		{"control", `writable = ["~/.claude\u001b"]`, []string{"control characters"}},
		{"not a list", `writable = "~/.claude"`, []string{`writable = ["~/.claude"]`}},
		{"pids zero", `pids_limit = 0`, []string{"p.hcl:1:14: invalid pids_limit; pids_limit is a whole number from 16"}},
		{"pids string", `pids_limit = "4096"`, []string{"invalid pids_limit", "without quotes"}},
		{"pids fraction", `pids_limit = 100.5`, []string{"invalid pids_limit"}},
		{"pids misspelt", `pid_limit = 100`, []string{"did you mean pids_limit?"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("p.hcl", []byte(tc.src))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("Parse(%q) = %v, want a *ParseError", tc.src, err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestObeyedLaterProblem(t *testing.T) {
	for rel, want := range map[string]bool{
		"": true, ".": true, ".config": true, ".config/git": true, ".config/git/config": true, ".config/myagent": false,
		".claude": false, ".cache": true, ".cache/go-build": false, ".local/share/postern/runs/x": false,
		".local/share": true, "src/project": false, ".sshx": false, "go": true, "go/pkg/mod": false,
	} {
		if _, bad := ObeyedLaterProblem(rel); bad != want {
			t.Errorf("ObeyedLaterProblem(%q) = %v, want %v", rel, bad, want)
		}
	}
}

func TestSystemPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/": true, "/etc": true, "/etc/cron.d": true, "/usr/local/bin": true, "/home": true, "/home/alice": false,
		"/var": true, "/var/lib": true, "/var/lib/jenkins/workspace/x": false, "/var/tmp/x": false, "/tmp": true,
		"/tmp/x": false, "/root": true, "/root/proj": false, "/srv/proj": false, "/run/user/1000/x": true, "/etcetera": false,
	} {
		if _, bad := SystemPath(p); bad != want {
			t.Errorf("SystemPath(%q) = %v, want %v", p, bad, want)
		}
	}
}
