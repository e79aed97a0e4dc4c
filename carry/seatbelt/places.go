package seatbelt

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// PlacesSpec names where a run works; PlacesFor turns it into Places.
type PlacesSpec struct {
	// Dir is the run's working directory.
	Dir string
	// Home is the run's home: writable, its guarded files excepted, as the
	// Linux wall has it.
	Home string
	// Temp are the run's temporary directories: its own (which is also
	// where it may use unix sockets, Temp[0]) and the shared ones programs
	// write to whatever TMPDIR says (/tmp, /var/tmp, the user's temporary
	// directory).
	Temp []string
	// NeverWritable are postern's own places: its records (POSTERN_HOME)
	// and, on a remote machine, its agent's directory.
	NeverWritable []string
}

// guardedInHome are paths relative to the run's home that programs outside
// the sandbox obey: the same files the Linux wall holds read-only, and the
// places macOS starts programs from or takes their settings from.
var guardedInHome = []string{
	// Shells at their next start.
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish",
	// git everywhere, and ssh (read-only: keys, known hosts, configuration).
	".gitconfig", ".config/git", ".ssh",
	// Build tools, editors and agents at their next start outside: cargo's
	// linker and runner settings, gradle's init scripts, an editor's startup
	// files, gpg-agent's pinentry program, IPython's startup scripts.
	".cargo/config.toml", ".cargo/config",
	".gradle/init.d", ".gradle/init.gradle", ".gradle/init.gradle.kts",
	".vimrc", ".config/nvim", ".emacs", ".emacs.d/init.el",
	".gnupg/gpg-agent.conf",
	".ipython/profile_default/startup",
	// macOS: launchd's per-user jobs (started at login), the login items of
	// the background task manager, applications' preferences (a terminal's
	// startup command is one), and the scripts iTerm2 runs at its start.
	"Library/LaunchAgents",
	"Library/Application Support/com.apple.backgroundtaskmanagementagent",
	"Library/Preferences",
	"Library/Application Support/iTerm2/Scripts",
}

// guardedInRepo are paths relative to the work tree of the repository the run
// works in: direnv's .envrc runs at the next cd into it.
var guardedInRepo = []string{".envrc"}

// guardedInGitDir are paths relative to a git directory that git obeys rather
// than keeps: its configuration (core.fsmonitor, aliases, hooksPath), hooks,
// where a linked work tree's common directory is, and its info (attributes
// and excludes: a filter driver named there runs).
var guardedInGitDir = []string{"config", "config.worktree", "hooks", "commondir", "info"}

// Other repositories under the home are guarded too: git obeys their
// configuration and hooks outside the sandbox just as this one's. They are
// searched for breadth first, bounded in depth, directories read and time.
// The profile travels as an argument of sandbox-exec, within macOS's 1 MiB
// for a command line; each repository adds about 2 KB, so at most
// repoSearchRepos are guarded.
const (
	repoSearchDepth = 3
	repoSearchDirs  = 2000
	repoSearchTime  = 50 * time.Millisecond
	repoSearchRepos = 100
)

// repoSearchSkip are directories that hold no repositories of the user's own
// but many directories.
var repoSearchSkip = map[string]bool{
	".git": true, "node_modules": true, "vendor": true, "target": true, "venv": true, ".venv": true,
	"__pycache__": true, ".cache": true, ".npm": true, ".cargo": true, ".rustup": true, ".m2": true,
	".gradle": true, ".local": true, "go": true, ".nvm": true, "Library": true, ".Trash": true,
}

// PlacesFor finds the places of a run: the directories it may write (its
// working directory, the work tree and git directories of the repository
// around it, its home and temporary directories) and the guarded paths in
// them. Every path is made real (symbolic links resolved, the nearest existing
// directory for a path that does not exist yet). It reads the filesystem, and
// nothing else.
func PlacesFor(s PlacesSpec) Places {
	var pl Places
	addW := func(p string) {
		if r := realPath(p); r != "" && !slices.Contains(pl.Writable, r) {
			pl.Writable = append(pl.Writable, r)
		}
	}
	addG := func(p string) {
		if r := realPath(p); r != "" && !slices.Contains(pl.Guarded, r) {
			pl.Guarded = append(pl.Guarded, r)
		}
	}
	home := ""
	if filepath.IsAbs(s.Home) {
		home = filepath.Clean(s.Home)
	}
	var gitDirs []string
	if filepath.IsAbs(s.Dir) {
		dir := filepath.Clean(s.Dir)
		addW(dir)
		top, gds := gitRepo(dir)
		// A work tree whose top is / or above the home is the machine's, not
		// a project: the run gets only its working directory of it.
		if len(gds) > 0 && top != "/" && !(home != "" && home != top && isUnder(home, top)) {
			addW(top)
			for _, g := range gds {
				addW(g)
			}
			for _, g := range guardedInRepo {
				addG(filepath.Join(top, g))
			}
			gitDirs = append(gitDirs, gds...)
		}
	}
	if home != "" {
		addW(home)
		for _, g := range guardedInHome {
			addG(filepath.Join(home, g))
		}
		gitDirs = append(gitDirs, homeGitDirs(home)...)
	}
	for _, t := range s.Temp {
		if filepath.IsAbs(t) {
			addW(t)
		}
	}
	if len(s.Temp) > 0 && filepath.IsAbs(s.Temp[0]) {
		if r := realPath(s.Temp[0]); r != "" {
			pl.Sockets = append(pl.Sockets, r)
		}
	}
	for _, gd := range gitDirs {
		for _, g := range guardedInGitDir {
			addG(filepath.Join(gd, g))
		}
	}
	for _, n := range s.NeverWritable {
		if filepath.IsAbs(n) {
			addG(n)
		}
	}
	return pl
}

// realPath is p with symbolic links resolved. For a path that does not exist
// (yet), its nearest existing ancestor is resolved and the rest kept as
// written.
func realPath(p string) string {
	p = filepath.Clean(p)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return ""
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}

// isUnder reports whether p is below dir (not dir itself).
func isUnder(p, dir string) bool {
	return p != dir && (dir == "/" || strings.HasPrefix(p, dir+"/"))
}

// homeGitDirs are the git directories of the repositories found under home.
func homeGitDirs(home string) []string {
	type dir struct {
		path  string
		depth int
	}
	var out []string
	deadline := time.Now().Add(repoSearchTime)
	queue := []dir{{home, 0}}
	for read := 0; len(queue) > 0 && read < repoSearchDirs && len(out) < repoSearchRepos && time.Now().Before(deadline); read++ {
		d := queue[0]
		queue = queue[1:]
		ents, err := os.ReadDir(d.path)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == ".git" }) {
			_, gds := gitRepo(d.path)
			out = append(out, gds...)
			if d.depth > 0 {
				continue // a work tree's own directories hold its files, rarely repositories
			}
		}
		for _, e := range ents {
			if e.IsDir() && d.depth < repoSearchDepth && !repoSearchSkip[e.Name()] {
				queue = append(queue, dir{filepath.Join(d.path, e.Name()), d.depth + 1})
			}
		}
	}
	return out
}

// gitRepo finds the work tree around dir and its git directories: .git, or
// for a linked work tree or submodule the directory its .git file names and
// that directory's common directory. Outside a repository it returns dir and
// no git directory.
func gitRepo(dir string) (top string, gitDirs []string) {
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		dotGit := filepath.Join(d, ".git")
		st, err := os.Stat(dotGit)
		switch {
		case err == nil && st.IsDir():
			return d, []string{dotGit}
		case err == nil && st.Mode().IsRegular():
			gd := gitFileTarget(dotGit)
			if gd == "" {
				return d, nil
			}
			dirs := []string{gd}
			if b, err := os.ReadFile(filepath.Join(gd, "commondir")); err == nil {
				common := strings.TrimSpace(string(b))
				if !filepath.IsAbs(common) {
					common = filepath.Join(gd, common)
				}
				dirs = append(dirs, filepath.Clean(common))
			}
			return d, dirs
		}
		if d == filepath.Dir(d) {
			return filepath.Clean(dir), nil
		}
	}
}

// gitFileTarget reads the "gitdir: PATH" line of a .git file.
func gitFileTarget(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return ""
	}
	gd, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "gitdir:")
	if !ok {
		return ""
	}
	gd = strings.TrimSpace(gd)
	if !filepath.IsAbs(gd) {
		gd = filepath.Join(filepath.Dir(path), gd)
	}
	return filepath.Clean(gd)
}
