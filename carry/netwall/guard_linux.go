package netwall

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// The run keeps its working directory and home writable, but some files in
// them are obeyed later by programs outside the wall, with the host's network:
// a shell's startup files, git's configuration and hooks, ssh's configuration,
// the user's systemd units and autostart entries, direnv's .envrc. A run that
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
			out = append(out, GuardChange{Path: path})
		case was.exists && err == nil && st.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(path); err == nil && target == was.link {
				continue
			}
			fallthrough
		case was.exists && err == nil:
			out = append(out, GuardChange{Path: path, Was: "a link to " + was.link})
		}
	}
	slices.SortFunc(out, func(a, b GuardChange) int { return strings.Compare(a.Path, b.Path) })
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
