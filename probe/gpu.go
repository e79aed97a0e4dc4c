package probe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/postern-dev/postern/internal/termtext"
)

// GPU is one GPU as the driver lists it.
type GPU struct {
	Index int
	Name  string
	UUID  string
}

// gpuSources are where the GPU rung looks; tests point them elsewhere.
type gpuSources struct {
	smi     string // the nvidia-smi to run: a name looked up on PATH, or a path
	devGlob string // the NVIDIA device nodes of GPUs (not nvidiactl, nvidia-uvm)
}

var defaultGPUSources = gpuSources{smi: "nvidia-smi", devGlob: "/dev/nvidia[0-9]*"}

// gpuTimeout bounds nvidia-smi: a driver that hangs answers no.
const gpuTimeout = 15 * time.Second

// MeasureGPU asks the machine's NVIDIA driver for its GPUs (nvidia-smi -L);
// without nvidia-smi it opens the NVIDIA device nodes. It answers yes with the
// GPUs found, or no with what was tried.
func MeasureGPU(ctx context.Context) Rung { return measureGPU(ctx, defaultGPUSources) }

func measureGPU(ctx context.Context, src gpuSources) Rung {
	if path, err := exec.LookPath(src.smi); err == nil {
		return askSMI(ctx, path)
	}
	nodes, _ := filepath.Glob(src.devGlob)
	if len(nodes) == 0 {
		return no(fmt.Sprintf("no %s on PATH and no %s device", src.smi, strings.TrimSuffix(src.devGlob, "[0-9]*")+"N"),
			"a machine with an NVIDIA GPU needs its driver (which brings nvidia-smi); a GPU of another kind can be declared with 'postern machine label NAME gpu=KIND'")
	}
	var opened, failed []string
	for _, n := range nodes {
		f, err := os.OpenFile(n, os.O_RDWR, 0)
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", n, errors.Unwrap(err)))
			continue
		}
		f.Close()
		opened = append(opened, n)
	}
	if len(opened) == 0 {
		return no(fmt.Sprintf("no %s on PATH, and no NVIDIA device node opens: %s", src.smi, strings.Join(failed, "; ")),
			"load the NVIDIA driver and let this user open its devices (often the video group), then measure again")
	}
	return yes(fmt.Sprintf("%s: %s (no %s on PATH to name them)", plural(len(opened), "NVIDIA device"), strings.Join(opened, ", "), src.smi))
}

func askSMI(ctx context.Context, path string) Rung {
	ctx, cancel := context.WithTimeout(ctx, gpuTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-L")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if err != nil {
		said := firstLine(stderr.Bytes())
		if said == "" {
			said = firstLine(stdout.Bytes())
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s", gpuTimeout)
		}
		detail := fmt.Sprintf("%s -L: %v", path, err)
		if said != "" {
			detail += ": " + termtext.Printable(said)
		}
		return no(detail, "load the NVIDIA driver nvidia-smi was installed with (nvidia-smi talks to it), then measure again")
	}
	gpus := parseGPUList(stdout.Bytes())
	if len(gpus) == 0 {
		return no(fmt.Sprintf("%s -L listed no GPU", path), "")
	}
	names := make([]string, len(gpus))
	for i, g := range gpus {
		names[i] = fmt.Sprintf("GPU %d %s", g.Index, termtext.Printable(g.Name))
	}
	return yes(plural(len(gpus), "GPU") + ": " + strings.Join(names, "; "))
}

// parseGPUList reads nvidia-smi -L:
//
//	GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5a8c0a2e-...)
//	  MIG 1g.5gb      Device  0: (UUID: MIG-...)
//
// Lines that do not list a whole GPU (MIG slices, notices) are skipped.
func parseGPUList(out []byte) []GPU {
	var gpus []GPU
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 4096), 64*1024)
	for sc.Scan() && len(gpus) < 1024 {
		line := strings.TrimRight(sc.Text(), "\r")
		rest, ok := strings.CutPrefix(line, "GPU ")
		if !ok {
			continue
		}
		num, desc, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		idx, err := strconv.Atoi(num)
		if err != nil || idx < 0 {
			continue
		}
		g := GPU{Index: idx, Name: strings.TrimSpace(desc)}
		if i := strings.LastIndex(g.Name, "(UUID:"); i >= 0 && strings.HasSuffix(g.Name, ")") {
			g.UUID = strings.TrimSpace(g.Name[i+len("(UUID:") : len(g.Name)-1])
			g.Name = strings.TrimSpace(g.Name[:i])
		}
		if g.Name == "" {
			continue
		}
		gpus = append(gpus, g)
	}
	return gpus
}

func firstLine(b []byte) string {
	s := strings.TrimSpace(string(b))
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = strings.TrimSpace(s[:i])
	}
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
