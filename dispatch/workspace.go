package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	"github.com/postern-dev/postern/dispatch/workspace"
	"github.com/postern-dev/postern/internal/termtext"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/probe"
	"github.com/postern-dev/postern/records"
	"github.com/postern-dev/postern/remote-agent/agent"
	"github.com/postern-dev/postern/remote-agent/transport/ssh"
)

// Workspace says what work a run takes to its machine (postern run
// --workspace) and what becomes of the copy.
type Workspace struct {
	// Mode is WorkspaceAuto (""), WorkspaceNone, WorkspaceCopy or
	// WorkspaceDir.
	Mode string
	// Dir is the directory WorkspaceDir ships.
	Dir string
	// Keep keeps the copy on the machine once its result is home.
	Keep bool
	// MaxResult bounds the result's size; 0 is 1 GiB.
	MaxResult int64
	// Progress, if set, is told how shipping goes (a terminal).
	Progress io.Writer
}

// Workspace modes.
const (
	// WorkspaceAuto: a remote run started in a git work tree takes it
	// along; any other run works where it is.
	WorkspaceAuto = "auto"
	// WorkspaceNone: the run works where it is (remote: a directory of its
	// own on the machine).
	WorkspaceNone = "none"
	// WorkspaceCopy: the run works in a fresh copy of its git work tree,
	// local runs too, so that runs side by side never share one.
	WorkspaceCopy = "copy"
	// WorkspaceDir ships the plain directory Workspace.Dir.
	WorkspaceDir = "dir"
)

// planWorkspace decides, before anything is spawned, which work the run
// takes along, and records it in run. nil: none.
func planWorkspace(ctx context.Context, spec Spec, m machine.Machine, run *records.Run) (*workspace.Source, error) {
	mode := spec.Workspace.Mode
	if mode == "" {
		mode = WorkspaceAuto
	}
	var src *workspace.Source
	var err error
	switch mode {
	case WorkspaceNone:
		return nil, nil
	case WorkspaceAuto:
		if m.IsLocal() {
			return nil, nil
		}
		src, err = workspace.Find(ctx, spec.Dir)
		if errors.Is(err, workspace.ErrNotRepository) {
			return nil, nil
		}
	case WorkspaceCopy:
		src, err = workspace.Find(ctx, spec.Dir)
		if errors.Is(err, workspace.ErrNotRepository) {
			return nil, fmt.Errorf("--workspace copy: %s is %w; give a directory with --workspace DIR, or --workspace none", spec.Dir, err)
		}
	case WorkspaceDir:
		src, err = workspace.Plain(spec.Workspace.Dir)
	default:
		return nil, fmt.Errorf("--workspace %q: give auto, none, copy or a directory", mode)
	}
	if err != nil {
		return nil, err
	}
	ws := &records.Workspace{Mode: "git", Repo: src.Root, Subdir: src.Subdir, Base: src.Base, Branch: src.Branch, Key: src.Key,
		Keep: spec.Workspace.Keep, MaxResult: spec.Workspace.MaxResult}
	switch {
	case src.Plain:
		ws.Mode = "plain"
	case m.IsLocal():
		ws.Mode = "copy"
	}
	if ws.MaxResult <= 0 {
		ws.MaxResult = workspace.DefaultMaxResult
	}
	run.Workspace = ws
	return src, nil
}

// request is the workspace request for run.
func wsRequest(run *records.Run, op string) agent.WorkspaceRequest {
	ws := run.Workspace
	return agent.WorkspaceRequest{Op: op, RunID: run.ID, Key: ws.Key, Base: ws.Base, Branch: ws.Branch, Plain: ws.Mode == "plain", MaxResult: ws.MaxResult}
}

// stepper does one workspace step on a machine.
type stepper func(ctx context.Context, req agent.WorkspaceRequest, upload io.Reader, download io.Writer) (*agent.WorkspaceResult, error)

// shipWorkspace ships src for run through step: it asks what the machine's
// cache holds, then sends the history it lacks and the snapshot, and
// returns the directory the run starts in there. It ends before the run's
// command starts.
func shipWorkspace(ctx context.Context, store *records.Store, run *records.Run, src *workspace.Source, progress io.Writer, where string, step stepper, objects string) (string, error) {
	// objects: an object directory that has the history already (no bundle).
	ws := run.Workspace
	ws.ShipStartedAt = time.Now().UTC()
	req := wsRequest(run, agent.WorkspaceInspect)
	if !src.Plain {
		req.Key = src.Key
		req.Name, req.Email = src.Name, src.Email
	}
	var known []string
	if !src.Plain {
		var res *agent.WorkspaceResult
		var err error
		if step != nil {
			res, err = step(ctx, req, nil, nil)
		} else {
			places, perr := workspace.DefaultPlaces()
			if perr != nil {
				return "", perr
			}
			res, err = workspace.Inspect(ctx, places, req.Key)
		}
		if err != nil {
			return "", fmt.Errorf("workspace on %s: %w", where, err)
		}
		known = res.Known
	}
	tmp, err := os.MkdirTemp("", "postern-ship-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	var files []string
	if objects == "" && !src.Plain {
		bundle := filepath.Join(tmp, "history.bundle")
		has, err := src.Bundle(ctx, known, bundle)
		if err != nil {
			return "", fmt.Errorf("bundle the history of %s: %w", src.Root, err)
		}
		if has {
			st, err := os.Stat(bundle)
			if err != nil {
				return "", err
			}
			req.BundleSize = st.Size()
			files = append(files, bundle)
		}
	}
	paths, skipped, err := src.Changes(ctx)
	if err != nil {
		return "", fmt.Errorf("read the work tree %s: %w", src.Root, err)
	}
	snap := filepath.Join(tmp, "snapshot.tar")
	f, err := os.Create(snap)
	if err != nil {
		return "", err
	}
	more, err := src.WriteSnapshot(paths, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	skipped = append(skipped, more...)
	if len(skipped) > 0 && progress != nil {
		fmt.Fprintf(progress, "postern: not shipped (repositories or special files of their own): %q\n", skipped)
	}
	files = append(files, snap)
	upload, total, closeAll, err := openAll(files)
	if err != nil {
		return "", err
	}
	defer closeAll()
	var up io.Reader = upload
	if progress != nil && total > 8<<20 {
		up = &shipProgress{r: upload, w: progress, total: total, where: where}
	}
	req.Op = agent.WorkspacePrepare
	var res *agent.WorkspaceResult
	if step != nil {
		res, err = step(ctx, req, up, nil)
	} else {
		places, perr := workspace.DefaultPlaces()
		if perr != nil {
			return "", perr
		}
		res, err = workspace.Prepare(ctx, places, req, up, objects)
	}
	if err != nil {
		return "", fmt.Errorf("ship the work to %s: %w", where, err)
	}
	ws.Dir = termtext.Printable(res.Dir)
	ws.State = records.WorkspaceShipped
	ws.Shipped, ws.Bundled = total, req.BundleSize
	ws.ShippedAt = time.Now().UTC()
	if err := store.PutRun(run); err != nil {
		return "", err
	}
	return path.Join(res.Dir, src.Subdir), nil
}

func openAll(paths []string) (io.Reader, int64, func(), error) {
	var rs []io.Reader
	var fs []*os.File
	var total int64
	closeAll := func() {
		for _, f := range fs {
			f.Close()
		}
	}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			closeAll()
			return nil, 0, nil, err
		}
		st, err := f.Stat()
		if err != nil {
			closeAll()
			return nil, 0, nil, err
		}
		total += st.Size()
		fs = append(fs, f)
		rs = append(rs, f)
	}
	return io.MultiReader(rs...), total, closeAll, nil
}

// shipProgress shows a large shipment's progress on one terminal line.
type shipProgress struct {
	r     io.Reader
	w     io.Writer
	total int64
	done  int64
	last  time.Time
	where string
}

func (p *shipProgress) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.done += int64(n)
	if err != nil || time.Since(p.last) > 100*time.Millisecond {
		p.last = time.Now()
		fmt.Fprintf(p.w, "\rpostern: shipping the work to %s: %3d%% (%.1f of %.1f MB)", p.where, p.done*100/max(p.total, 1), float64(p.done)/1e6, float64(p.total)/1e6)
		if err != nil {
			fmt.Fprintln(p.w)
		}
	}
	return n, err
}

// fetchWorkspace brings the run's result home through step (nil: this
// machine), after its command has ended, and removes the copy there once
// it is home unless it is to be kept. What went wrong is in the record and
// returned; the copy is then kept for 'postern runs fetch'.
func fetchWorkspace(ctx context.Context, store *records.Store, run *records.Run, step, remove stepper) error {
	ws := run.Workspace
	ws.FetchStartedAt = time.Now().UTC()
	err := collectAndImport(ctx, run, step)
	if err == nil {
		ws.FetchedAt = time.Now().UTC()
	}
	if err == nil && !ws.Keep {
		if remove != nil {
			_, err = remove(ctx, wsRequest(run, agent.WorkspaceRemove), nil, nil)
		} else {
			places, perr := workspace.DefaultPlaces()
			if err = perr; err == nil {
				_, err = workspace.Remove(places, run.ID, ws.Key)
			}
		}
		if err == nil {
			ws.Removed = true
		} else {
			err = fmt.Errorf("the result is home, but the copy on the machine was not removed: %w", err)
		}
	}
	if err != nil {
		ws.Error = termtext.Printable(err.Error())
		if ws.State == records.WorkspaceShipped {
			ws.State = records.WorkspaceKept
		}
	} else {
		ws.Error = ""
		if ws.Keep && ws.State != records.WorkspaceFetched && ws.State != records.WorkspaceUnchanged {
			ws.State = records.WorkspaceKept
		}
	}
	if perr := store.PutRun(run); perr != nil {
		return errors.Join(err, perr)
	}
	return err
}

func collectAndImport(ctx context.Context, run *records.Run, step stepper) error {
	ws := run.Workspace
	if ws.Mode == "plain" {
		ws.State = records.WorkspaceUnchanged
		return nil // a plain directory's results stay on the machine
	}
	tmp, err := os.CreateTemp("", "postern-result-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	lim := &workspace.Limited{W: tmp, Max: ws.MaxResult}
	req := wsRequest(run, agent.WorkspaceCollect)
	var res *agent.WorkspaceResult
	if step != nil {
		res, err = step(ctx, req, nil, lim)
	} else {
		places, perr := workspace.DefaultPlaces()
		if perr != nil {
			return perr
		}
		res, err = workspace.Collect(ctx, places, req, lim)
	}
	if err != nil {
		return fmt.Errorf("fetch the result: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if !res.Changed {
		ws.State = records.WorkspaceUnchanged
		return nil
	}
	if res.Size != lim.N {
		return fmt.Errorf("fetch the result: got %d of %d bytes", lim.N, res.Size)
	}
	bundle := ""
	if res.Size > 0 {
		bundle = tmp.Name()
	}
	imp, err := workspace.Import(ctx, ws.Repo, run.ID, ws.Base, res, bundle)
	if err != nil {
		return err
	}
	ws.State = records.WorkspaceFetched
	ws.Result, ws.ResultBranch, ws.Descends, ws.Commits = imp.Commit, imp.Branch, imp.Descends, imp.Commits
	if st, err := workspace.Diff(ctx, ws.Repo, ws.Base, imp.Commit, true); err == nil {
		if len(st) > 8<<10 {
			st = append(st[:8<<10], "…\n"...)
		}
		ws.Stat = string(st)
	}
	return nil
}

// ServeAgentWorkspace is the agent's side of a workspace step.
func ServeAgentWorkspace(ctx context.Context, req agent.WorkspaceRequest, upload io.Reader, download io.Writer) (*agent.WorkspaceResult, error) {
	places, err := workspace.DefaultPlaces()
	if err != nil {
		return nil, err
	}
	switch req.Op {
	case agent.WorkspaceInspect:
		return workspace.Inspect(ctx, places, req.Key)
	case agent.WorkspacePrepare:
		return workspace.Prepare(ctx, places, req, upload, "")
	case agent.WorkspaceCollect:
		return workspace.Collect(ctx, places, req, download)
	case agent.WorkspaceRemove:
		return workspace.Remove(places, req.RunID, req.Key)
	}
	return nil, fmt.Errorf("unknown workspace step %q", req.Op)
}

// agentStepper does workspace steps on a machine whose agent was just
// dialled over sc: each step on an agent process of its own, which has
// ended when the step returns.
func agentStepper(sc *sshclient.Client, in agent.Install, name string) stepper {
	return func(ctx context.Context, req agent.WorkspaceRequest, upload io.Reader, download io.Writer) (*agent.WorkspaceResult, error) {
		t := ssh.NewTransport(sc)
		defer t.Close()
		c, p, err := in.Start(ctx, t)
		if err != nil {
			return nil, fmt.Errorf("machine %s: %w", name, err)
		}
		defer p.Close()
		res, err := c.Workspace(ctx, req, upload, download)
		if err != nil {
			var we *agent.WorkspaceError
			if errors.As(err, &we) {
				return nil, errors.New(termtext.Printable(we.Error()))
			}
			return nil, err
		}
		awaitAgent(p)
		return res, nil
	}
}

// agentInstall is the agent a machine runs, as connectAgent finds it.
func agentInstall(m machine.Machine, goos, goarch, version string) (agent.Install, error) {
	if version == "" {
		version = "dev"
	}
	bin, err := agent.Locate(goos, goarch)
	if err != nil {
		return agent.Install{}, err
	}
	hash, err := agent.CachedFileHash(bin)
	if err != nil {
		return agent.Install{}, err
	}
	return agent.Install{Binary: bin, Hash: hash, Dir: m.AgentDir, Version: version}, nil
}

// startWorkspace plans the run's workspace and, for a local copy, makes it:
// spec.Dir becomes the copy. A remote run's work is shipped by
// runRemoteWorkspace once its machine answers.
func startWorkspace(ctx context.Context, store *records.Store, run *records.Run, spec *Spec, m machine.Machine) error {
	src, err := planWorkspace(ctx, *spec, m, run)
	if err != nil || src == nil {
		return err
	}
	progress := spec.Workspace.Progress
	if progress == nil && isTerminal(spec.Stderr) {
		progress = spec.Stderr
	}
	if !m.IsLocal() {
		spec.Remote.ship = src
		if spec.Workspace.Progress == nil {
			spec.Workspace.Progress = progress
		}
		return nil
	}
	// The copy's history is a cache of postern's, as on a remote machine:
	// the caller's own object directory may be where the wall hides it
	// (under /tmp), and a run must never lean on it.
	dir, err := shipWorkspace(ctx, store, run, src, progress, "a local copy", nil, "")
	if err != nil {
		return err
	}
	spec.Dir = dir
	return nil
}

// endLocalWorkspace brings a local copy's result home once the run has ended.
func endLocalWorkspace(ctx context.Context, store *records.Store, run *records.Run) {
	ws := run.Workspace
	if ws == nil || ws.Mode == "git" || ws.State != records.WorkspaceShipped {
		return
	}
	_ = fetchWorkspace(context.WithoutCancel(ctx), store, run, nil, nil)
}

// runRemoteWorkspace ships the work to the machine on agent processes of
// their own, which have ended before the run's command is sent; runs the
// command in the copy; and, once it has ended, brings the result home on
// another.
func runRemoteWorkspace(ctx context.Context, store *records.Store, run *records.Run, spec Spec, rec *probe.Record, m machine.Machine, src []byte, c *agent.Client, p agent.Process, sc *sshclient.Client, goos, goarch string) (int, error) {
	in, err := agentInstall(m, goos, goarch, spec.Remote.Version)
	if err != nil {
		return 0, err
	}
	step := agentStepper(sc, in, m.Name)
	dir, err := shipWorkspace(ctx, store, run, spec.Remote.ship, spec.Workspace.Progress, "machine "+m.Name, step, "")
	if err != nil {
		return 0, err
	}
	spec.Remote.Dir = dir
	code, runErr := runOnAgent(ctx, store, run, spec, rec, m, src, c, p)
	ws := run.Workspace
	if errors.Is(runErr, ErrRunLost) {
		ws.State = records.WorkspaceKept
		ws.Error = fmt.Sprintf("the run was lost: its copy stays on %s until its result is fetched with 'postern runs fetch %s'", m.Name, run.ID)
		_ = store.PutRun(run)
		return code, runErr
	}
	if err := fetchWorkspace(context.WithoutCancel(ctx), store, run, step, step); err != nil {
		fmt.Fprintf(spec.Warn, "postern: run %s: its result did not come home: %v; the copy stays on %s: 'postern runs fetch %s'\n", run.ID, err, m.Name, run.ID)
	}
	return code, runErr
}
