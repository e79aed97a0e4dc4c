package machine

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
)

// SSHConfig is the part of an OpenSSH client configuration (~/.ssh/config) postern
// follows: Host blocks with patterns and negations, HostName, User, Port,
// IdentityFile, IdentitiesOnly, ProxyJump, ProxyCommand, ServerAliveInterval, UserKnownHostsFile,
// StrictHostKeyChecking and Include. Other keywords are kept but not acted on;
// Match blocks other than "Match all" never apply.
type SSHConfig struct {
	entries []sshEntry
}

// sshEntry is one keyword line and the Host conditions that guard it (every one
// must match; an Include inside a Host block adds its condition to the included
// file's lines).
type sshEntry struct {
	key, value string
	conds      [][]string // each a Host line's patterns
	never      bool       // inside a Match block postern does not evaluate
	at         string     // file:line
}

// maxIncludeDepth bounds Include recursion, as OpenSSH does.
const maxIncludeDepth = 16

// LoadSSHConfig reads an ssh config file; a missing file is an empty config.
// Include paths that are not absolute are relative to dir (~/.ssh for the
// user's config).
func LoadSSHConfig(file, dir string) (*SSHConfig, error) {
	src, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return &SSHConfig{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ssh config: %w", err)
	}
	c := &SSHConfig{}
	if err := c.parse(file, src, dir, nil, false, 0); err != nil {
		return nil, err
	}
	return c, nil
}

// ParseSSHConfig parses ssh config text. Include lines are followed relative to
// dir; dir "" ignores them.
func ParseSSHConfig(filename string, src []byte, dir string) (*SSHConfig, error) {
	c := &SSHConfig{}
	if err := c.parse(filename, src, dir, nil, false, 0); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *SSHConfig) parse(filename string, src []byte, dir string, outer [][]string, outerNever bool, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("%s: Include nested more than %d deep", filename, maxIncludeDepth)
	}
	conds := outer
	never := outerNever
	sc := bufio.NewScanner(bytes.NewReader(src))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	n := 0
	for sc.Scan() {
		n++
		at := filename + ":" + strconv.Itoa(n)
		key, args, err := splitConfigLine(sc.Text())
		if err != nil {
			return fmt.Errorf("%s: %v", at, err)
		}
		if key == "" {
			continue
		}
		switch key {
		case "host":
			if len(args) == 0 {
				return fmt.Errorf("%s: Host needs at least one pattern", at)
			}
			conds = append(append([][]string(nil), outer...), args)
			never = outerNever
			continue
		case "match":
			conds = append([][]string(nil), outer...)
			never = outerNever || !(len(args) == 1 && strings.EqualFold(args[0], "all"))
			continue
		case "include":
			if dir == "" {
				continue
			}
			for _, pat := range args {
				pat = expandTilde(pat)
				if !filepath.IsAbs(pat) {
					pat = filepath.Join(dir, pat)
				}
				files, err := filepath.Glob(pat)
				if err != nil {
					return fmt.Errorf("%s: Include %q: %v", at, pat, err)
				}
				for _, f := range files {
					b, err := os.ReadFile(f)
					if err != nil {
						return fmt.Errorf("%s: Include %q: %w", at, f, err)
					}
					if err := c.parse(f, b, dir, conds, never, depth+1); err != nil {
						return err
					}
				}
			}
			continue
		}
		if len(args) == 0 {
			return fmt.Errorf("%s: %s needs a value", at, key)
		}
		value := strings.Join(args, " ")
		if key == "proxycommand" {
			// A command line for the shell: kept as written, quotes and all.
			value = rawConfigValue(sc.Text())
		}
		c.entries = append(c.entries, sshEntry{key: key, value: value, conds: conds, never: never, at: at})
	}
	return sc.Err()
}

// splitConfigLine splits one line into a lowercased keyword and its arguments,
// honouring "key=value", double quotes and comments.
func splitConfigLine(line string) (string, []string, error) {
	line = strings.TrimSpace(line)
	if line == "" || line[0] == '#' {
		return "", nil, nil
	}
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return strings.ToLower(line), nil, nil
	}
	key := strings.ToLower(line[:i])
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "=") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	var args []string
	for rest != "" {
		if rest[0] == '#' {
			break
		}
		var arg string
		if rest[0] == '"' {
			end := strings.IndexByte(rest[1:], '"')
			if end < 0 {
				return "", nil, fmt.Errorf("unterminated quote in %q", line)
			}
			arg, rest = rest[1:1+end], rest[2+end:]
		} else {
			end := strings.IndexAny(rest, " \t")
			if end < 0 {
				end = len(rest)
			}
			arg, rest = rest[:end], rest[end:]
		}
		args = append(args, arg)
		rest = strings.TrimLeft(rest, " \t")
	}
	return key, args, nil
}

// rawConfigValue is a line's value as written: everything after the keyword
// and its separator.
func rawConfigValue(line string) string {
	line = strings.TrimSpace(line)
	i := strings.IndexAny(line, " \t=")
	if i < 0 {
		return ""
	}
	rest := strings.TrimLeft(line[i:], " \t")
	if strings.HasPrefix(rest, "=") {
		rest = strings.TrimLeft(rest[1:], " \t")
	}
	return rest
}

// hostMatches applies one Host line: some pattern matches and no negated one does.
func hostMatches(patterns []string, host string) bool {
	host = strings.ToLower(host)
	matched := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		p = strings.ToLower(strings.TrimPrefix(p, "!"))
		ok, err := path.Match(p, host)
		if err != nil || !ok {
			continue
		}
		if neg {
			return false
		}
		matched = true
	}
	return matched
}

// SSHHost is what the configuration says about one host.
type SSHHost struct {
	Alias               string // the name as given
	HostName            string
	User                string
	Port                int
	IdentityFiles       []string
	CertificateFiles    []string
	IdentitiesOnly      bool
	ProxyJump           string // "" or a comma-separated list of [user@]host[:port]
	ProxyCommand        string // "" or a shell command line whose stdin and stdout carry ssh
	ServerAliveInterval int    // seconds; 0 is unset
	ConnectTimeout      int    // seconds; 0 is unset
	UserKnownHostsFiles []string
	StrictHostKeyCheck  string
	// HostKeyAlias is the name host keys are looked up and recorded under
	// in known_hosts instead of HostName.
	HostKeyAlias string
}

// Lookup evaluates the configuration for host, as 'ssh -G host' would for the
// keywords postern follows: the first value obtained for each keyword wins, and
// IdentityFile accumulates.
func (c *SSHConfig) Lookup(host string) SSHHost {
	h := SSHHost{Alias: host}
	seen := map[string]bool{}
	for _, e := range c.entries {
		if e.never {
			continue
		}
		ok := true
		for _, cond := range e.conds {
			if !hostMatches(cond, host) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if e.key == "identityfile" {
			h.IdentityFiles = append(h.IdentityFiles, e.value)
			continue
		}
		if e.key == "certificatefile" {
			h.CertificateFiles = append(h.CertificateFiles, e.value)
			continue
		}
		if seen[e.key] {
			continue
		}
		seen[e.key] = true
		// ProxyJump and ProxyCommand compete: the first given wins.
		switch e.key {
		case "proxyjump":
			seen["proxycommand"] = true
		case "proxycommand":
			seen["proxyjump"] = true
		}
		switch e.key {
		case "hostname":
			h.HostName = e.value
		case "user":
			h.User = e.value
		case "port":
			h.Port, _ = strconv.Atoi(e.value)
		case "identitiesonly":
			h.IdentitiesOnly = strings.EqualFold(e.value, "yes")
		case "proxyjump":
			h.ProxyJump = e.value
		case "proxycommand":
			h.ProxyCommand = e.value
		case "serveraliveinterval":
			h.ServerAliveInterval, _ = strconv.Atoi(e.value)
		case "connecttimeout":
			h.ConnectTimeout, _ = strconv.Atoi(e.value)
		case "userknownhostsfile":
			h.UserKnownHostsFiles = strings.Fields(e.value)
		case "stricthostkeychecking":
			h.StrictHostKeyCheck = strings.ToLower(e.value)
		case "hostkeyalias":
			h.HostKeyAlias = e.value
		}
	}
	if h.HostName == "" {
		h.HostName = host
	} else {
		h.HostName = strings.ReplaceAll(h.HostName, "%h", host)
	}
	return h
}

// Expand expands the tokens OpenSSH allows in IdentityFile and
// UserKnownHostsFile, and a leading "~".
func (h SSHHost) Expand(s, localUser, home string) string {
	r := strings.NewReplacer("%%", "%", "%h", h.HostName, "%n", h.Alias, "%p", strconv.Itoa(h.Port),
		"%r", h.User, "%u", localUser, "%d", home)
	return ExpandHome(r.Replace(s), home)
}

func expandTilde(p string) string {
	home, _ := os.UserHomeDir()
	return ExpandHome(p, home)
}

// ExpandHome replaces a leading "~" of p with home.
func ExpandHome(p, home string) string {
	if p == "~" {
		return home
	}
	if rest, ok := strings.CutPrefix(p, "~/"); ok {
		return filepath.Join(home, rest)
	}
	return p
}
