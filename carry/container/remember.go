package container

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/postern-dev/postern/internal/kernel"
)

// What detection and adaptation learn about an engine takes seconds to learn
// again (podman info, failed starts while resource limits are adapted), so it
// is remembered per user, keyed by everything it depends on.

// rememberedEngine is one engine as remembered.
type rememberedEngine struct {
	Key           string         `json:"key"`
	Name          string         `json:"name"`
	Path          string         `json:"path"`
	Version       string         `json:"version"`
	Runtime       string         `json:"runtime"`
	CgroupManager string         `json:"cgroup_manager"`
	Rootless      bool           `json:"rootless"`
	Adapted       []string       `json:"adapted,omitempty"`
	Global        []string       `json:"global,omitempty"`
	Ulimits       map[int]uint64 `json:"ulimits,omitempty"`
}

// rememberPath is where engines are remembered; "" when there is no cache
// directory. A variable so tests can point it elsewhere.
var rememberPath = func() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "postern", "container-engines.json")
}

// engineKey names what a remembered engine depends on: the engine's binary,
// the kernel, this process's own resource limits and user.
func engineKey(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%s|%d|%d|%s|%s|%d", path, st.Size(), st.ModTime().UnixNano(), kernel.Release(), hardLimits(), os.Geteuid()) + "|" + runtime.GOARCH
}

// DetectRemembered is Detect, unless this user already detected (and ran a
// container with) the engine under the same conditions: then what was learnt,
// adapted resource limits included, is used without asking the engine again.
func DetectRemembered(ctx context.Context, name string) (*Engine, error) {
	if e := recall(name); e != nil {
		return e, nil
	}
	return Detect(ctx, name)
}

func recall(name string) *Engine {
	p := rememberPath()
	if p == "" {
		return nil
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil
	}
	var all []rememberedEngine
	if json.Unmarshal(b, &all) != nil {
		return nil
	}
	for _, r := range all {
		if name != "" && r.Name != name {
			continue
		}
		if r.Key == "" || r.Key != engineKey(r.Path) {
			continue
		}
		return &Engine{Name: r.Name, Path: r.Path, Version: r.Version, Runtime: r.Runtime, CgroupManager: r.CgroupManager,
			Rootless: r.Rootless, Adapted: r.Adapted, global: r.Global, ulimits: r.Ulimits, remembered: true}
	}
	return nil
}

// remember stores what is known of e, replacing what was remembered of its
// name. Failing to remember is not an error: it only costs time next run.
func (e *Engine) remember() {
	p := rememberPath()
	if p == "" {
		return
	}
	key := engineKey(e.Path)
	if key == "" {
		return
	}
	e.mu.Lock()
	r := rememberedEngine{Key: key, Name: e.Name, Path: e.Path, Version: e.Version, Runtime: e.Runtime,
		CgroupManager: e.CgroupManager, Rootless: e.Rootless, Adapted: e.Adapted, Global: e.global, Ulimits: map[int]uint64{}}
	for k, v := range e.ulimits {
		r.Ulimits[k] = v
	}
	e.mu.Unlock()
	all := []rememberedEngine{r}
	if b, err := os.ReadFile(p); err == nil {
		var old []rememberedEngine
		if json.Unmarshal(b, &old) == nil {
			for _, o := range old {
				if o.Name != e.Name {
					all = append(all, o)
				}
			}
		}
	}
	writeAtomic(p, all)
}

// forget drops what was remembered of e's name, when it no longer holds.
func (e *Engine) forget() {
	p := rememberPath()
	if p == "" {
		return
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return
	}
	var old, keep []rememberedEngine
	if json.Unmarshal(b, &old) != nil {
		_ = os.Remove(p)
		return
	}
	for _, o := range old {
		if o.Name != e.Name {
			keep = append(keep, o)
		}
	}
	writeAtomic(p, keep)
}

func writeAtomic(p string, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return
	}
	tmp := p + ".tmp-" + strconv.Itoa(os.Getpid())
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return
	}
	if err := os.Rename(tmp, p); err != nil {
		_ = os.Remove(tmp)
	}
}
