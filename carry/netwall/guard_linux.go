package netwall

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/postern-dev/postern/internal/termtext"
)

// The run keeps its working directory and home writable, but some files in
// them are obeyed later by programs outside the wall, with the host's network:
// a shell's startup files, git's configuration and hooks, ssh's configuration,
// the user's systemd units and autostart entries, direnv's .envrc, build
// tools' and editors' startup files. A run that
// could write them would leave the wall at the next login, commit or cd. Those
// that exist are bound read-only onto themselves inside the run: writes,
// truncation, removal and renaming over them all fail, and the rest of home and
// the working directory stay writable.

// guardedInHome are paths relative to the run's home.
var guardedInHome = []string{
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".config/fish",
	".gitconfig", ".config/git",
	".ssh",
	".config/systemd", ".config/autostart", ".config/environment.d",
	// Run by build tools, editors and agents at their next start outside:
	// cargo's linker and runner settings, gradle's init scripts, an editor's
	// startup files, gpg-agent's pinentry program, IPython's startup scripts.
	".cargo/config.toml", ".cargo/config",
	".gradle/init.d", ".gradle/init.gradle", ".gradle/init.gradle.kts",
	".vimrc", ".config/nvim", ".emacs", ".emacs.d/init.el",
	".gnupg/gpg-agent.conf",
	".ipython/profile_default/startup",
}

// guardedInRepo are paths relative to the work tree of the git repository the
// run's working directory is in (or the directory itself outside a repository).
var guardedInRepo = []string{".envrc"}

// guardedInGitDir are paths relative to that repository's git directory.
var guardedInGitDir = []string{"config", "hooks"}

// workPlaces are where a run works: its working directory, the git work tree
// around it (top, or the directory itself outside a repository) with its git
// directories, and its home.
type workPlaces struct {
	dir, top, home string
	gitDirs        []string
}

func workPlacesOf(cfg initConfig) workPlaces {
	w := workPlaces{dir: cfg.Dir}
	for _, e := range cfg.Env {
		if v, ok := strings.CutPrefix(e, "HOME="); ok {
			w.home = v
		}
	}
	if filepath.IsAbs(cfg.Dir) {
		w.top, w.gitDirs = gitRepo(cfg.Dir)
	}
	return w
}

// runDirs are the host directories a run works in: its working directory; the
// git work tree around it and that tree's git directories, so that a run
// started in a subdirectory of a repository can commit as one started at its
// top; and its home. A work tree whose top is / or above the home is not
// taken: that is a repository of the machine's, not a project.
func (w workPlaces) runDirs() []string {
	dirs := []string{w.dir}
	home := filepath.Clean(w.home)
	if len(w.gitDirs) > 0 && w.top != "/" && !(filepath.IsAbs(home) && home != w.top && under(home, []string{w.top})) {
		dirs = append(dirs, w.top)
		dirs = append(dirs, w.gitDirs...)
	}
	if w.home != "" {
		dirs = append(dirs, w.home)
	}
	return dirs
}

// guardedPaths are the guarded paths that exist and lie in a writable
// directory, as they really are (symlinks resolved), each once.
func (w workPlaces) guardedPaths(writable []string) []string {
	var out []string
	for _, c := range w.guardCandidates() {
		real, err := filepath.EvalSymlinks(c)
		if err != nil || !under(real, writable) || slices.Contains(out, real) {
			continue
		}
		out = append(out, real)
	}
	return out
}

// guardCandidates are the guarded paths of these places, whether they exist
// or not, as named (not resolved).
func (w workPlaces) guardCandidates() []string {
	var cands []string
	if filepath.IsAbs(w.home) {
		for _, g := range guardedInHome {
			cands = append(cands, filepath.Join(w.home, g))
		}
	}
	if w.top != "" {
		for _, g := range guardedInRepo {
			cands = append(cands, filepath.Join(w.top, g))
		}
		for _, d := range w.gitDirs {
			for _, g := range guardedInGitDir {
				cands = append(cands, filepath.Join(d, g))
			}
		}
	}
	return cands
}

// A guarded path that does not exist cannot be bound read-only, and one that
// is a symbolic link is bound at its target while the link itself stays a
// name in a writable directory: a run can create the first (a ~/.bash_profile
// that bash will then read instead of ~/.profile) or replace the second. The
// wall cannot stop either without taking the directory around it from the
// run, so it watches them instead: what each was before the run, against what
// it is once every process of the run is gone.

// guardState is what one guarded path was: nothing, a link to a target, or
// something else (bound read-only inside the run, so unchanged by it).
type guardState struct {
	exists bool
	link   string // the target, for a symbolic link
}

// watchGuards records, before the run, the guarded paths the wall cannot bind
// read-only: those missing and those that are symbolic links.
func watchGuards(w workPlaces) map[string]guardState {
	writable := writableDirs(w.runDirs())
	out := make(map[string]guardState)
	for _, c := range w.guardCandidates() {
		// The nearest directory above that exists decides whether the run
		// could make the path (~/.config/systemd with no ~/.config yet).
		parent := filepath.Dir(c)
		for {
			if _, err := os.Stat(parent); err == nil || parent == filepath.Dir(parent) {
				break
			}
			parent = filepath.Dir(parent)
		}
		if real, err := filepath.EvalSymlinks(parent); err != nil || !under(real, writable) {
			continue
		}
		st, err := os.Lstat(c)
		switch {
		case err != nil:
			out[c] = guardState{}
		case st.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(c)
			if err == nil {
				out[c] = guardState{exists: true, link: target}
			}
		}
	}
	return out
}

// guardChanges are the watched paths that are not what they were, in order.
func guardChanges(before map[string]guardState) []GuardChange {
	var out []GuardChange
	for path, was := range before {
		st, err := os.Lstat(path)
		switch {
		case !was.exists && err == nil:
			out = append(out, GuardChange{Path: path, What: "appeared during the run"})
		case was.exists && err == nil && st.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(path); err == nil && target == was.link {
				continue
			}
			fallthrough
		case was.exists && err == nil:
			out = append(out, GuardChange{Path: path, What: "was a link to " + termtext.Printable(was.link) + " and the run replaced it"})
		}
	}
	return out
}

// Other repositories under the home are not guarded inside the run: a bind
// mount for each would cost its start-up. Yet git obeys their configuration
// and hooks outside the wall: a hook planted in ~/src/other/.git/hooks runs at
// the next commit there, a core.fsmonitor line in its config at the next git
// status. So the home is searched for repositories (breadth first, bounded)
// while the wall goes up, before the command starts, and again once the run
// is over for those it made; then each such file whose change time is not
// before the run's start is reported. The kernel sets a file's change time on
// every write, rename or attribute change, and no call lets a process set it
// back.
const (
	// repoSearchDepth is how deep under the home a work tree is looked for:
	// ~/a/b/c is the deepest.
	repoSearchDepth = 3
	// repoSearchDirs and repoSearchTime bound the directories read and the
	// time spent reading them, which the command's start (beside raising
	// the wall) and the run's end wait for.
	repoSearchDirs = 2000
	repoSearchTime = 50 * time.Millisecond
	// ctimeSlack allows for file times coming from a clock that ticks
	// coarsely: a change at the run's first instant may be stamped a tick
	// earlier.
	ctimeSlack = 20 * time.Millisecond
)

// repoSearchSkip are directories that hold no repositories of the user's own
// but many directories.
var repoSearchSkip = map[string]bool{
	".git": true, "node_modules": true, "vendor": true, "target": true, "venv": true, ".venv": true,
	"__pycache__": true, ".cache": true, ".npm": true, ".cargo": true, ".rustup": true, ".m2": true,
	".gradle": true, ".local": true, "go": true, "snap": true, ".vscode-server": true, ".nvm": true,
}

// homeGitDirs are the git directories of the repositories found under home
// (see repoSearchDepth and repoSearchDirs).
func homeGitDirs(home string) []string {
	if !filepath.IsAbs(home) {
		return nil
	}
	type dir struct {
		path  string
		depth int
	}
	var out []string
	deadline := time.Now().Add(repoSearchTime)
	queue := []dir{{filepath.Clean(home), 0}}
	for read := 0; len(queue) > 0 && read < repoSearchDirs; read++ {
		d := queue[0]
		queue = queue[1:]
		if time.Now().After(deadline) {
			break
		}
		ents, err := os.ReadDir(d.path)
		if err != nil {
			continue
		}
		// A work tree's own directories are not searched: repositories
		// nested in one are rare, and its files are many. A home that is a
		// work tree itself (dotfiles kept in git) is searched all the same.
		if slices.ContainsFunc(ents, func(e os.DirEntry) bool { return e.Name() == ".git" }) {
			_, gitDirs := gitRepo(d.path)
			out = append(out, gitDirs...)
			if d.depth > 0 {
				continue
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

// changedGitFiles are the configuration and hooks of gitDirs whose change time
// is at or after since, and the git directories made since then (a clone or
// git init by the run: all of it is the run's). A hook git would not run (a
// .sample) is left out.
func changedGitFiles(gitDirs []string, since time.Time) []GuardChange {
	var out []GuardChange
	changed := func(p string) bool {
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			return false
		}
		return !time.Unix(st.Ctim.Unix()).Before(since)
	}
	for _, gd := range gitDirs {
		var stx unix.Statx_t
		if unix.Statx(unix.AT_FDCWD, gd, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BTIME, &stx) == nil &&
			stx.Mask&unix.STATX_BTIME != 0 && !time.Unix(stx.Btime.Sec, int64(stx.Btime.Nsec)).Before(since) {
			out = append(out, GuardChange{Path: gd, What: "appeared during the run"})
			continue
		}
		if p := filepath.Join(gd, "config"); changed(p) {
			out = append(out, GuardChange{Path: p, What: "changed during the run"})
		}
		hooks := filepath.Join(gd, "hooks")
		ents, _ := os.ReadDir(hooks)
		for _, e := range ents {
			if p := filepath.Join(hooks, e.Name()); !strings.HasSuffix(e.Name(), ".sample") && changed(p) {
				out = append(out, GuardChange{Path: p, What: "changed during the run"})
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

// bindGuards makes each guarded path a mount point of its own, for readOnly
// to seal once the writable directories are bound.
func bindGuards(guards []string) error {
	for _, g := range guards {
		if err := unix.Mount(g, g, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return err
		}
	}
	return nil
}
