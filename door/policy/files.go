package policy

import (
	"fmt"
	"math/big"
	"path"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// What a run may do with the host's files, beside the network. Inside the wall
// the host's filesystems are read-only, the run's home reads as the real one
// while its writes land in a private layer discarded at the end, and the
// working directory is the one place written for real. These attributes add
// to that:
//
//	writable   = ["~/.claude", "~/.claude.json"]  # written for real; default DefaultWritable
//	deny_read  = ["~/.config/vendor/token"]       # masked, added to DefaultDenyRead
//	allow_read = ["~/.kube/config"]               # exempt from deny_read, defaults included
//	pids_limit = 4096                             # processes and threads of the run at once
//
// A path is "~/"-relative (the home of the user the run runs as, on its
// machine) or absolute. deny_read and allow_read entries may use the
// wildcards of path.Match (*, ?, [...]) in any element; a directory matched is
// masked whole.

// PathRule is one entry of writable, deny_read or allow_read.
type PathRule struct {
	Text string // as written: "~/.claude", "/srv/cache"
	Pos  string // "file:line:col"; "" for a built-in default
}

// DefaultPidsLimit is the pids_limit of a policy that does not set one.
const DefaultPidsLimit = 4096

// minPidsLimit is the least pids_limit a policy may set: below it a shell
// running a pipeline could not start.
const minPidsLimit = 16

// DefaultWritable are the places a run writes for real when its policy has no
// writable attribute: the agents' own state, which they need across runs (a
// login whose token is refreshed, a session to resume). Each is also read by
// that agent when it runs outside the wall, and holds settings that run
// commands (Claude Code's hooks and MCP servers in ~/.claude/settings.json and
// ~/.claude.json, Codex's notify program in ~/.codex/config.toml): write
// writable = [] to keep even these private to each run.
//
// Build caches (~/.cache/go-build, ~/go/pkg/mod, ~/.npm, ~/.cache/pip,
// ~/.cargo/registry) are not among them: builds on the host take what they
// hold without checking it again (a compiled package, an extracted module, a
// wheel, npx's packages), so a run that could write them could change what
// later builds on the host contain. Inside the run they read as the host's,
// and what the run adds lands in its private layer.
var DefaultWritable = []PathRule{{Text: "~/.claude"}, {Text: "~/.claude.json"}, {Text: "~/.codex"}}

// DefaultDenyRead are masked inside every run: secrets an agent has no
// business reading. ~/.ssh/* with the exceptions of DefaultAllowRead masks the
// private keys, whatever they are called, and leaves what ssh needs to check
// hosts.
var DefaultDenyRead = []PathRule{
	{Text: "~/.ssh/*"},
	{Text: "~/.aws/credentials"}, {Text: "~/.aws/sso"}, {Text: "~/.aws/cli/cache"},
	{Text: "~/.config/gcloud"}, {Text: "~/.azure"},
	{Text: "~/.netrc"}, {Text: "~/.git-credentials"}, {Text: "~/.config/git/credentials"},
	{Text: "~/.config/gh/hosts.yml"}, {Text: "~/.pypirc"},
	{Text: "~/.docker/config.json"}, {Text: "~/.kube/config"},
	{Text: "~/.gnupg/private-keys-v1.d"}, {Text: "~/.gnupg/secring.gpg"},
	{Text: "~/.local/share/keyrings"}, {Text: "~/.password-store"},
	{Text: "~/.mozilla"}, {Text: "~/.config/google-chrome"}, {Text: "~/.config/chromium"},
	{Text: "/etc/shadow"}, {Text: "/etc/shadow-"}, {Text: "/etc/gshadow"}, {Text: "/etc/gshadow-"},
	{Text: "/etc/ssh/ssh_host_*_key"},
}

// DefaultAllowRead are exempt from the defaults of deny_read: what in ~/.ssh
// is public.
var DefaultAllowRead = []PathRule{
	{Text: "~/.ssh/*.pub"}, {Text: "~/.ssh/known_hosts"}, {Text: "~/.ssh/known_hosts.old"},
	{Text: "~/.ssh/config"}, {Text: "~/.ssh/authorized_keys"}, {Text: "~/.ssh/authorized_keys2"},
}

// ObeyedLater are the places under a home that programs outside the wall obey:
// a shell at login, git at every command, the user's systemd, a build tool at
// its next start, postern itself. No writable entry and no working directory
// may be one, lie inside one, or contain one. Each is named by its path below
// the home and what it is.
var ObeyedLater = []struct{ Rel, What string }{
	{".bashrc", "a shell's startup file"}, {".bash_profile", "a shell's startup file"},
	{".bash_login", "a shell's startup file"}, {".bash_logout", "a shell's startup file"},
	{".bash_aliases", "a shell's startup file (sourced by Debian's .bashrc)"},
	{".profile", "a shell's startup file"}, {".zshrc", "a shell's startup file"},
	{".zshenv", "a shell's startup file"}, {".zprofile", "a shell's startup file"},
	{".zlogin", "a shell's startup file"}, {".zlogout", "a shell's startup file"},
	{".kshrc", "a shell's startup file"}, {".cshrc", "a shell's startup file"}, {".tcshrc", "a shell's startup file"},
	{".inputrc", "readline's startup file"}, {".pam_environment", "the login environment"},
	{".xprofile", "the graphical session's startup"}, {".xsession", "the graphical session's startup"},
	{".xsessionrc", "the graphical session's startup"}, {".xinitrc", "the graphical session's startup"},
	{".config/fish", "fish's startup files"}, {".config/environment.d", "the login environment"},
	{".config/autostart", "programs the desktop starts at login"},
	{".config/systemd", "the user's systemd units"}, {".local/share/systemd", "the user's systemd units"},
	{".config/git", "git's configuration"}, {".gitconfig", "git's configuration"},
	{".config/direnv", "direnv's configuration"}, {".local/share/direnv", "direnv's list of allowed .envrc files"},
	{".ssh", "ssh's keys and configuration"}, {".gnupg", "gpg's keys and agent configuration"},
	{".aws", "the AWS CLI's configuration (its credential_process runs)"},
	{".kube", "kubectl's configuration (its exec plugins run)"},
	{".docker", "docker's configuration (its credential helpers and plugins run)"},
	{".local/bin", "programs first in a login shell's PATH"}, {"bin", "programs in a login shell's PATH"},
	{".local/lib", "python's user site-packages (.pth files run at every start)"},
	{".cargo", "cargo's configuration and installed programs"}, {".rustup", "the installed Rust toolchains"},
	{"go/bin", "programs go install put in PATH"}, {".nvm", "the installed Node versions"},
	{".pyenv", "the installed Python versions"}, {".gradle", "gradle's init scripts"}, {".m2", "maven's settings"},
	{".npmrc", "npm's configuration"}, {".ipython", "IPython's startup scripts"},
	{".vimrc", "an editor's startup file"}, {".vim", "an editor's startup files"}, {".config/nvim", "an editor's startup files"},
	{".emacs", "an editor's startup file"}, {".emacs.d", "an editor's startup files"},
	{".vscode-server", "the editor server an editor runs over ssh"},
	{".local/state/postern", "postern's records (POSTERN_HOME)"}, {".cache/postern", "postern's agents"},
}

// SystemPath says why abs, an absolute clean path, may not be written by a
// run (nor be its working directory): it is /, a directory of the system
// (/etc, /usr, /var, /home, ...), or lies in a tree of the system's (/etc/...,
// /usr/...). bad is false for any other path.
func SystemPath(abs string) (why string, bad bool) {
	if abs == "/" {
		return "/ is the whole machine", true
	}
	for _, t := range systemTrees {
		if abs == t || strings.HasPrefix(abs, t+"/") {
			return fmt.Sprintf("%s is the system's (%s)", abs, t), true
		}
	}
	for _, d := range systemDirs {
		if abs == d {
			return fmt.Sprintf("%s is a directory of the system's, which holds others' files", abs), true
		}
	}
	return "", false
}

// systemTrees hold nothing a run may write.
var systemTrees = []string{"/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin", "/snap", "/sys", "/usr"}

// systemDirs may hold places a run may write (/home/alice/proj, /var/tmp/x),
// but are not such places themselves.
var systemDirs = []string{"/home", "/lost+found", "/media", "/mnt", "/nix", "/opt", "/root", "/srv", "/tmp",
	"/var", "/var/backups", "/var/cache", "/var/lib", "/var/local", "/var/log", "/var/mail", "/var/opt", "/var/spool", "/var/tmp"}

// ObeyedLaterProblem says why rel, a clean path below a home ("" for the home
// itself), may not be written by a run: it is the home, or is, contains or
// lies inside one of ObeyedLater.
func ObeyedLaterProblem(rel string) (why string, bad bool) {
	if rel == "" || rel == "." {
		return "it is the home itself, whose writes are private to each run", true
	}
	for _, o := range ObeyedLater {
		switch {
		case rel == o.Rel:
			return fmt.Sprintf("~/%s is %s, which programs outside the wall obey", o.Rel, o.What), true
		case strings.HasPrefix(o.Rel, rel+"/"):
			return fmt.Sprintf("it contains ~/%s, %s, which programs outside the wall obey", o.Rel, o.What), true
		case strings.HasPrefix(rel, o.Rel+"/"):
			return fmt.Sprintf("it lies in ~/%s, %s, which programs outside the wall obey", o.Rel, o.What), true
		}
	}
	return "", false
}

// HomeRelative splits a path rule's text into its path below the home (for
// "~/x") or its absolute path (for "/x"), cleaned.
func HomeRelative(text string) (rel string, abs string, ok bool) {
	switch {
	case text == "~" || text == "~/":
		return ".", "", true
	case strings.HasPrefix(text, "~/"):
		return path.Clean(text[2:]), "", true
	case strings.HasPrefix(text, "/"):
		return "", path.Clean(text), true
	}
	return "", "", false
}

// pathRules compiles writable, deny_read or allow_read.
func (c *compiler) pathRules(a *hclsyntax.Attribute, globs bool) []PathRule {
	texts, ranges := c.strElems(a, `"~/.claude", "/srv/cache"`)
	out := make([]PathRule, 0, len(texts))
	for i, text := range texts {
		if summary, detail := pathProblem(a.Name, text, globs); summary != "" {
			c.errorf(ranges[i], summary, "%s", detail)
			continue
		}
		out = append(out, PathRule{Text: text, Pos: posString(ranges[i])})
	}
	return out
}

// pathProblem says what is wrong with one path entry and what to write
// instead, or returns "" when nothing is.
func pathProblem(attr, text string, globs bool) (summary, detail string) {
	bad := fmt.Sprintf("invalid %s entry %q", attr, text)
	if text == "" {
		return fmt.Sprintf("empty %s entry", attr), `write a path such as "~/.claude" or "/srv/cache"`
	}
	if strings.TrimSpace(text) != text {
		return bad, fmt.Sprintf("remove the spaces around it: %q", strings.TrimSpace(text))
	}
	if strings.ContainsFunc(text, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return bad, "a path may not hold control characters"
	}
	rel, abs, ok := HomeRelative(text)
	if !ok {
		if strings.HasPrefix(text, "$HOME/") || strings.HasPrefix(text, "${HOME}/") {
			return bad, fmt.Sprintf("write the home as ~: %q", "~/"+text[strings.IndexByte(text, '/')+1:])
		}
		return bad, fmt.Sprintf("a path is absolute or starts with ~/ (the home): %q", "~/"+text)
	}
	p := rel
	if abs != "" {
		p = abs
	}
	for _, el := range strings.Split(strings.TrimPrefix(text, "~/"), "/") {
		if el == ".." {
			return bad, "write the path without .., as it is: a run's home differs from machine to machine"
		}
	}
	if hasMeta(p) {
		if !globs {
			return bad, "writable entries name places, without wildcards; list each place"
		}
		for _, el := range strings.Split(p, "/") {
			if _, err := path.Match(el, ""); err != nil {
				return bad, fmt.Sprintf("the wildcard in %q is malformed (%v); see Go's path.Match", el, err)
			}
		}
	}
	if attr != "writable" {
		return "", ""
	}
	if abs != "" {
		if why, sys := SystemPath(abs); sys {
			return fmt.Sprintf("writable entry %q is a system place", text),
				fmt.Sprintf("%s, and a run may never write it; list a directory of the project's own, e.g. \"/srv/cache/build\"", why)
		}
		return "", ""
	}
	if why, obeyed := ObeyedLaterProblem(rel); obeyed {
		return fmt.Sprintf("writable entry %q may not be written by a run", text),
			fmt.Sprintf("%s; list only the agent's own state, such as \"~/.claude\" or \"~/.config/<agent>\"", why)
	}
	return "", ""
}

func hasMeta(p string) bool { return strings.ContainsAny(p, `*?[\`) }

func (c *compiler) pidsLimit(a *hclsyntax.Attribute) {
	v, ok := c.value(a.Expr)
	if !ok {
		return
	}
	if v.Type() == cty.Number {
		f := v.AsBigFloat()
		if f.IsInt() && f.Cmp(big.NewFloat(minPidsLimit)) >= 0 && f.Cmp(big.NewFloat(1<<22)) <= 0 {
			n, _ := f.Int64()
			c.p.PidsLimit = int(n)
			return
		}
	}
	c.errorf(a.Expr.Range(), "invalid pids_limit",
		"pids_limit is a whole number from %d to %d, written without quotes: the processes and threads the run may have at once, as in pids_limit = %d",
		minPidsLimit, 1<<22, DefaultPidsLimit)
}
