package dispatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/machine"
	"github.com/postern-dev/postern/machine/sshclient"
	"github.com/postern-dev/postern/remote-agent/agent"
	"github.com/postern-dev/postern/remote-agent/transport/ssh"
)

// Leftover is something postern left on a machine that CleanRemote removes:
// an agent version's directory, or the image the probe imports into a
// container engine to measure the container rung.
type Leftover struct {
	Kind string `json:"kind"` // "agent", "probe-image" or "netfilter-hooks"
	// What is the directory (absolute) or the image reference.
	What string `json:"what"`
	// KiB is the space it takes, -1 when not measured (images).
	KiB int64 `json:"kib"`
	// Engine is the container engine holding an image ("" for agents).
	Engine string `json:"engine"`
	// Removed says it was removed (false with dry run, or when removing failed).
	Removed bool `json:"removed"`
}

// probeImageRef is the reference carry/container gives the probe's image.
var probeImageRef = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^localhost/postern-probe:[0-9a-f]{16}$`) })

// probeImagesCommand lists the probe's images in podman and docker, where
// they are installed: "image ENGINE REF" lines.
const probeImagesCommand = `for e in podman docker; do command -v "$e" >/dev/null 2>&1 || continue; ` +
	`"$e" image ls --format '{{.Repository}}:{{.Tag}}' 2>/dev/null | while read -r ref; do ` +
	`case "$ref" in localhost/postern-probe:*) printf 'image %s %s\n' "$e" "$ref";; esac; done; done; true`

// parseProbeImages reads probeImagesCommand's answer, from the remote: only
// lines naming a known engine and a probe image reference count.
func parseProbeImages(out string) []Leftover {
	var found []Leftover
	seen := map[string]bool{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "image" || (f[1] != "podman" && f[1] != "docker") || !probeImageRef().MatchString(f[2]) {
			continue
		}
		if seen[f[1]+" "+f[2]] {
			continue
		}
		seen[f[1]+" "+f[2]] = true
		found = append(found, Leftover{Kind: "probe-image", What: f[2], KiB: -1, Engine: f[1]})
	}
	return found
}

// CleanRemote finds what postern left on a remote machine — every agent
// version under its agent directory and the probe's container images — and,
// unless dryRun, removes it. What it found is returned either way, each
// marked removed or not. The machine's next run or probe installs the agent
// again.
func CleanRemote(ctx context.Context, m machine.Machine, r Remote, dryRun bool) ([]Leftover, error) {
	if m.IsLocal() {
		return CleanLocal(ctx, dryRun)
	}
	opts := r.SSH
	if opts.Identity == "" {
		opts.Identity = m.Identity
	}
	sc, err := sshclient.Dial(ctx, m.SSH, opts)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}
	defer sc.Close()
	t := ssh.NewTransport(sc)
	defer t.Close()
	agents, err := agent.ListInstalled(ctx, t, m.AgentDir)
	if err != nil {
		return nil, fmt.Errorf("machine %s: %w", m.Name, err)
	}
	var found []Leftover
	for _, a := range agents {
		found = append(found, Leftover{Kind: "agent", What: a.Path, KiB: a.KiB})
	}
	out, err := t.Output(ctx, probeImagesCommand)
	if err != nil {
		return found, fmt.Errorf("machine %s: list the probe's images: %w", m.Name, err)
	}
	found = append(found, parseProbeImages(string(out))...)
	if dryRun {
		return found, nil
	}
	var errs []error
	if err := agent.RemoveInstalled(ctx, t, agents); err != nil {
		errs = append(errs, err)
	} else {
		for i := range agents {
			found[i].Removed = true
			if r.Agents != nil {
				if err := r.Agents.RemoveAgent(m.Name, agents[i].Hash); err != nil {
					errs = append(errs, err)
				}
			}
		}
	}
	for i := len(agents); i < len(found); i++ {
		img := found[i]
		if _, err := t.Output(ctx, img.Engine+" image rm "+agent.ShellQuote(img.What)); err != nil {
			errs = append(errs, fmt.Errorf("remove image %s from %s: %w", img.What, img.Engine, err))
			continue
		}
		found[i].Removed = true
	}
	if len(errs) > 0 {
		return found, fmt.Errorf("machine %s: %w", m.Name, errors.Join(errs...))
	}
	return found, nil
}

// CleanLocal finds the probe's container images on this machine (no agent is
// installed here) and the network namespace holding the walls' netfilter
// hooks (netwall.HooksHolder; the next run makes it again) and, unless
// dryRun, removes them.
func CleanLocal(ctx context.Context, dryRun bool) ([]Leftover, error) {
	out, err := exec.CommandContext(ctx, "sh", "-c", probeImagesCommand).Output()
	if err != nil {
		return nil, fmt.Errorf("list the probe's images: %w", err)
	}
	found := parseProbeImages(string(out))
	var errs []error
	if netwall.HooksHeld() && os.Geteuid() == 0 { // root's to remove
		hooks := Leftover{Kind: "netfilter-hooks", What: netwall.HooksHolder, KiB: -1}
		if !dryRun {
			if _, err := netwall.ReleaseHooks(); err != nil {
				errs = append(errs, err)
			} else {
				hooks.Removed = true
			}
		}
		found = append(found, hooks)
	}
	if dryRun {
		return found, nil
	}
	for i, img := range found {
		if img.Kind != "probe-image" {
			continue
		}
		if out, err := exec.CommandContext(ctx, img.Engine, "image", "rm", img.What).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("remove image %s from %s: %w: %s", img.What, img.Engine, err, strings.TrimSpace(string(out))))
			continue
		}
		found[i].Removed = true
	}
	return found, errors.Join(errs...)
}
