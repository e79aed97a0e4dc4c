//go:build !postern_wallinit

package netwall

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/postern-dev/postern/door/policy"
)

// planLayout decides where a run in dir with env's HOME may write and what it
// may not read, or refuses with a *PlaceError.
func planLayout(dir string, env []string, f Files) (layout, error) {
	var l layout
	home, err := runHome(env)
	if err != nil {
		return l, err
	}
	l.Home = home
	protect := existing(f.Protect)

	wd, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return l, &PlaceError{What: "working directory", Path: dir, Why: err.Error(), Fix: "run from an existing directory"}
	}
	if why, fix := workDirProblem(wd, home, protect); why != "" {
		return l, &PlaceError{What: "working directory", Path: wd, Why: why, Fix: fix}
	}
	top, gitDirs := findRepo(wd)
	if top != wd {
		if why, _ := workDirProblem(top, home, protect); why != "" || len(gitDirs) == 0 {
			// The work tree around is the home's or the machine's, or no
			// repository at all: only the directory itself is the run's.
			top, gitDirs = wd, nil
		}
	}
	l.Binds = append(l.Binds, top)
	addGit := func(gd string) *gitPlace {
		for i := range l.Git {
			if l.Git[i].Dir == gd {
				return &l.Git[i]
			}
		}
		g := gitPlace{Dir: gd}
		for _, sub := range gitBound {
			if st, err := os.Lstat(filepath.Join(gd, sub)); err == nil && st.IsDir() {
				g.Bound = append(g.Bound, sub)
			}
		}
		l.Git = append(l.Git, g)
		return &l.Git[len(l.Git)-1]
	}
	for _, gd := range gitDirs {
		addGit(gd)
	}
	if len(gitDirs) > 0 {
		// The git directory .git names holds the index: its submodules are
		// held as the repository's own git directory is.
		links := submodules(top, gitDirs[0], &l)
		for _, sm := range submoduleGitDirs(top, links) {
			addGit(sm)
		}
		g := addGit(gitDirs[0])
		g.Index, g.Gitlinks = true, links
	}
	slices.SortFunc(l.Git, func(a, b gitPlace) int { return strings.Compare(a.Dir, b.Dir) })
	// A linked work tree's .git file names its git directory: git obeys it.
	if st, err := os.Lstat(filepath.Join(top, ".git")); err == nil && st.Mode().IsRegular() {
		l.ReadOnly = append(l.ReadOnly, filepath.Join(top, ".git"))
	}

	for _, w := range f.Writable {
		bind, copyRel, err := writablePlace(w, home, protect, f.Guard)
		if err != nil {
			return l, err
		}
		if bind != "" && !under(bind, l.Binds) {
			l.Binds = append(l.Binds, bind)
		}
		if copyRel != "" && !slices.Contains(l.Copies, copyRel) && !under(filepath.Join(home, copyRel), l.Binds) {
			l.Copies = append(l.Copies, copyRel)
		}
	}
	slices.Sort(l.Binds)
	// Whatever a writable place or the working directory holds, these stay
	// as they are.
	for _, p := range existing(f.ReadOnly) {
		if under(p, l.Binds) && !slices.Contains(l.ReadOnly, p) {
			l.ReadOnly = append(l.ReadOnly, p)
		}
	}
	l.Masks = append(l.Masks, protect...)
	l.Masks = append(l.Masks, denied(home, f.DenyRead, f.AllowRead)...)
	slices.Sort(l.Masks)
	l.Masks = slices.Compact(l.Masks)
	if f.KeepHome != "" && home != "" {
		k, err := filepath.EvalSymlinks(f.KeepHome)
		if err != nil {
			return l, fmt.Errorf("network wall: keep the home's writes in %s: %w", f.KeepHome, err)
		}
		l.Keep = k
	}
	return l, nil
}

// runHome is the run's home as it really is, or "" when HOME is unset or
// names nothing: then the run has no home to protect. A home that is the
// whole machine or the system's is refused.
func runHome(env []string) (string, error) {
	var home string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "HOME="); ok {
			home = v
		}
	}
	if home == "" || !filepath.IsAbs(home) {
		return "", nil
	}
	real, err := filepath.EvalSymlinks(home)
	if err != nil {
		return "", nil // nothing there: nothing of the host to keep
	}
	if st, err := os.Stat(real); err != nil || !st.IsDir() {
		return "", nil
	}
	if why, bad := policy.SystemPath(real); bad && real != "/root" {
		return "", &PlaceError{What: "home", Path: real, Why: "HOME=" + home + ": " + why + ", not a user's home",
			Fix: "set HOME to the user's home directory"}
	}
	return real, nil
}

// workDirProblem says why the run may not write dir, a real path, with home
// its real home: the machine's or the system's, the home or above it, a
// place programs outside the wall obey, inside postern's own, or inside a git
// directory. It returns "" when dir may be the run's.
func workDirProblem(dir, home string, protect []string) (why, fix string) {
	const cd = "cd to the project's own directory (for example ~/src/project) and run from there"
	if why, bad := policy.SystemPath(dir); bad {
		return why, cd
	}
	if (dir == "/root" || strings.HasPrefix(dir, "/root/")) && home != "/root" && !strings.HasPrefix(home, "/root/") {
		return "it lies in /root, the superuser's home, which is not this run's", cd
	}
	if home != "" {
		if dir == home {
			return "it is the home, which a run reads but never writes for real", cd
		}
		if under(home, []string{dir}) {
			return "it contains the home " + home + ", which a run reads but never writes for real", cd
		}
		if rel, ok := below(dir, home); ok {
			if why, bad := policy.ObeyedLaterProblem(rel); bad {
				return why, cd
			}
		}
	}
	for _, p := range protect {
		if under(dir, []string{p}) {
			return "it lies in " + p + ", which holds postern's own records or agents", cd
		}
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isGitDir(d) {
			return "it lies in the git directory " + d + ", whose configuration and hooks git obeys", "run from the work tree instead"
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return "", ""
}

// writablePlace checks one writable entry against home and protect and says
// how the run gets it: bound (bind, a real path), or copied back at the end
// (copyRel, below the home). An entry that names nothing the run could reach
// (no home, a missing absolute path) gets neither.
func writablePlace(w Place, home string, protect, guard []string) (bind, copyRel string, err error) {
	what := fmt.Sprintf("writable entry %q", w.Path)
	bad := func(p, why, fix string) error {
		return &PlaceError{What: what, Path: p, Pos: w.Pos, Why: why, Fix: fix}
	}
	const fixHome = `list only the agent's own state, such as "~/.claude"`
	rel, abs, ok := policy.HomeRelative(w.Path)
	if !ok {
		return "", "", bad(w.Path, "it is neither absolute nor below ~/", fixHome)
	}
	if rel != "" {
		if home == "" {
			return "", "", nil
		}
		abs = filepath.Join(home, rel)
	}
	real, exists := resolve(abs)
	if rel != "" {
		r, ok := below(real, home)
		if !ok {
			return "", "", bad(real, "it leads out of the home to "+real, fixHome)
		}
		if why, obeyed := policy.ObeyedLaterProblem(r); obeyed {
			return "", "", bad(real, why, fixHome)
		}
		rel = r
	} else if why, sys := policy.SystemPath(real); sys {
		return "", "", bad(real, why, "list a directory of the project's own")
	}
	for _, p := range protect {
		if under(real, []string{p}) || under(p, []string{real}) {
			return "", "", bad(real, "a run may never write "+p+", which holds postern's own records or agents", "list a place that does not hold it")
		}
	}
	for _, g := range guard {
		g, _ = resolve(g)
		if under(real, []string{g}) || under(g, []string{real}) {
			return "", "", bad(real, "a run may never write "+g+", which holds postern's workspaces (the repositories' cache and the runs' copies)", "list a place that does not hold it")
		}
	}
	var st os.FileInfo
	if exists {
		st, err = os.Stat(real)
		if err != nil {
			exists = false
		}
	}
	switch {
	case exists && st.IsDir():
		return real, "", nil
	case exists && !st.Mode().IsRegular():
		return "", "", bad(real, "it is neither a directory nor a regular file", "list a directory or a file")
	case rel != "":
		// A file, or nothing yet: what the run leaves there is copied back.
		return "", rel, nil
	case exists:
		return real, "", nil
	}
	return "", "", nil
}
