package agent

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
)

// KindWorkspace is a request about a run's workspace on the machine: one
// step of shipping the work there or bringing its result home. Each step is
// a request of its own, on an agent process of its own, that has ended
// before the run's command starts or that starts after it has ended.
const KindWorkspace = "workspace"

// Workspace steps.
const (
	// WorkspaceInspect asks whether the machine has git and which commits
	// its cache of the repository holds.
	WorkspaceInspect = "inspect"
	// WorkspacePrepare sends the bundle and the snapshot (the upload: the
	// bundle's BundleSize bytes, then the snapshot) and makes the run's
	// work tree.
	WorkspacePrepare = "prepare"
	// WorkspaceCollect commits what the run left and sends its result
	// (the download: a git bundle of one ref).
	WorkspaceCollect = "collect"
	// WorkspaceRemove removes the run's work tree.
	WorkspaceRemove = "remove"
)

// WorkspaceRequest is one step of a run's workspace.
type WorkspaceRequest struct {
	Op    string `json:"op"`
	RunID string `json:"run_id"`
	// Key names the repository's cache on the machine ("" : no cache).
	Key string `json:"key,omitempty"`
	// Base is the commit the run starts from ("" : an empty repository).
	Base string `json:"base,omitempty"`
	// Branch is the branch checked out at the base ("" : detached).
	Branch string `json:"branch,omitempty"`
	// BundleSize is how many bytes of the upload are the bundle.
	BundleSize int64 `json:"bundle_size,omitempty"`
	// Plain: the work is a plain directory, not a repository.
	Plain bool `json:"plain,omitempty"`
	// Name and Email are the person's git identity, given to the run's
	// copy.
	Name  string `json:"name,omitempty"`
	Email string `json:"email,omitempty"`
	// MaxResult bounds the result's size (collect).
	MaxResult int64 `json:"max_result,omitempty"`
}

// WorkspaceResult is what a step found or made.
type WorkspaceResult struct {
	Git   string   `json:"git,omitempty"`   // the machine's git version (inspect)
	Known []string `json:"known,omitempty"` // commits the cache holds (inspect)
	Dir   string   `json:"dir,omitempty"`   // the run's work tree (prepare)
	// Collect:
	Changed  bool   `json:"changed,omitempty"`
	Result   string `json:"result,omitempty"`   // the result's commit
	Descends bool   `json:"descends,omitempty"` // the result descends from the base
	Commits  int    `json:"commits,omitempty"`  // commits on top of the base
	Size     int64  `json:"size,omitempty"`     // the bundle's bytes in the download; 0: no bundle needed
	Ref      string `json:"ref,omitempty"`      // the bundle's one ref
}

// Workspace carries one workspace step: the upload goes to the agent as
// the request's input, what the agent sends back is written to download.
// A failed step is an error naming what the agent said.
func (c *Client) Workspace(ctx context.Context, req WorkspaceRequest, upload io.Reader, download io.Writer) (*WorkspaceResult, error) {
	if err := c.w.WriteJSON(FrameRequest, Request{Kind: KindWorkspace, Workspace: &req}); err != nil {
		return nil, fmt.Errorf("%w: send the workspace step: %v", ErrLost, err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	if upload != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256<<10)
			for {
				select {
				case <-stop:
					return
				default:
				}
				n, err := upload.Read(buf)
				if n > 0 {
					if c.w.Write(FrameStdin, buf[:n]) != nil {
						return
					}
				}
				if err != nil {
					_ = c.w.Write(FrameStdinEOF, nil)
					return
				}
			}
		}()
	} else {
		_ = c.w.Write(FrameStdinEOF, nil)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.sendLoop(stop, ClientIO{})
	}()
	var exit Exit
	var werr error
	err := c.readUntilExit(ctx, func(f Frame) error {
		switch f.Type {
		case FrameStdout:
			if download == nil {
				return fmt.Errorf("%w: the agent sent data for a step that has none", ErrBadFrame)
			}
			if _, err := download.Write(f.Payload); err != nil {
				werr = err
				return err
			}
		case FrameExit:
			return DecodeJSON(f, FrameExit, &exit)
		}
		return nil
	})
	if werr != nil {
		return nil, werr
	}
	if err != nil {
		return nil, err
	}
	if exit.Error != "" {
		return nil, &WorkspaceError{Op: req.Op, Said: exit.Error}
	}
	if exit.Workspace == nil {
		return nil, fmt.Errorf("%w: the workspace step %s ended without its result", ErrBadFrame, req.Op)
	}
	return exit.Workspace, nil
}

// WorkspaceError is a workspace step the agent could not do.
type WorkspaceError struct {
	Op   string
	Said string // what the agent said (from the remote: shown as printable text)
}

func (e *WorkspaceError) Error() string { return e.Op + ": " + e.Said }

// serveWorkspace is the agent's side of a workspace step: the controller's
// input frames are the upload, the step's output goes back as stdout frames.
func (s *session) serveWorkspace(ctx context.Context, h Handlers, req WorkspaceRequest) error {
	if h.Workspace == nil {
		s.start(nil)
		return s.exit(Exit{Code: 1, Error: "this agent has no workspaces"})
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		s.start(nil)
		return s.exit(Exit{Code: 1, Error: err.Error()})
	}
	defer pr.Close()
	s.start(pw)
	down := &frameWriter{w: s.w}
	res, err := h.Workspace(ctx, req, pr, down)
	if err != nil {
		return s.exit(Exit{Code: 1, Error: err.Error()})
	}
	return s.exit(Exit{Workspace: res})
}

// frameWriter sends what is written as stdout frames.
type frameWriter struct{ w *Writer }

func (f *frameWriter) Write(b []byte) (int, error) {
	if err := f.w.Write(FrameStdout, b); err != nil {
		return 0, err
	}
	return len(b), nil
}
