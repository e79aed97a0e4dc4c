package probe

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/postern-dev/postern/internal/testhosts"
)

// TestMeasureGPUThisMachine compares the rung with what asking directly says:
// nvidia-smi -L's GPU lines where it is installed, else the device nodes.
func TestMeasureGPUThisMachine(t *testing.T) {
	g := MeasureGPU(context.Background())
	t.Logf("gpu: %s (%s) remedy %q", g.Result, g.Detail, g.Remedy)
	if path, err := exec.LookPath("nvidia-smi"); err == nil {
		out, err := exec.Command(path, "-L").Output()
		n := 0
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, "GPU ") {
				n++
			}
		}
		if err == nil && n > 0 {
			if g.Result != Yes || !strings.HasPrefix(g.Detail, plural(n, "GPU")+":") {
				t.Fatalf("nvidia-smi -L lists %d GPUs, the rung says %+v", n, g)
			}
			return
		}
		if g.Result != No {
			t.Fatalf("nvidia-smi -L failed (%v) or listed none, the rung says %+v", err, g)
		}
		return
	}
	nodes, _ := filepath.Glob("/dev/nvidia[0-9]*")
	if len(nodes) > 0 {
		if g.Result != Yes && !strings.Contains(g.Detail, "opens") {
			t.Fatalf("device nodes %v, the rung says %+v", nodes, g)
		}
		return
	}
	if g.Result != No || !strings.Contains(g.Detail, "no nvidia-smi on PATH") || !strings.Contains(g.Detail, "/dev/nvidiaN") || g.Remedy == "" {
		t.Fatalf("no nvidia-smi and no device node here, the rung says %+v", g)
	}
}

// TestMeasureGPUWhenTheDriverFails: nvidia-smi installed but its driver not
// loaded (the common broken state) answers no, with what nvidia-smi said.
func TestMeasureGPUWhenTheDriverFails(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "script")
	const said = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest NVIDIA driver is installed and running."
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho \""+said+"\"\nexit 9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	smi := filepath.Join(dir, "nvidia-smi")
	if err := testhosts.CopyExecutable(script, smi); err != nil {
		t.Fatal(err)
	}
	g := measureGPU(context.Background(), gpuSources{smi: smi, devGlob: filepath.Join(dir, "none[0-9]*")})
	if g.Result != No || !strings.Contains(g.Detail, "exit status 9") || !strings.Contains(g.Detail, said) || g.Remedy == "" {
		t.Fatalf("rung says %+v", g)
	}
}

func TestParseGPUList(t *testing.T) {
	cases := []struct {
		name, out string
		want      []GPU
	}{
		{"none", "", nil},
		{"one", "GPU 0: NVIDIA GeForce RTX 3090 (UUID: GPU-5a8c0a2e-7a6c-7b3e-2d57-1f2a3b4c5d6e)\n",
			[]GPU{{0, "NVIDIA GeForce RTX 3090", "GPU-5a8c0a2e-7a6c-7b3e-2d57-1f2a3b4c5d6e"}}},
		{"two with MIG slices", "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n" +
			"  MIG 1g.5gb      Device  0: (UUID: MIG-bbbb)\n" +
			"  MIG 1g.5gb      Device  1: (UUID: MIG-cccc)\n" +
			"GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-dddd)\r\n",
			[]GPU{{0, "NVIDIA A100-SXM4-40GB", "GPU-aaaa"}, {1, "NVIDIA A100-SXM4-40GB", "GPU-dddd"}}},
		{"old driver without UUID", "GPU 0: Tesla K80\n", []GPU{{0, "Tesla K80", ""}}},
		{"notices and junk", "No devices were found\nGPU x: bad\nGPU -1: negative\nGPU 2:\n", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := parseGPUList([]byte(c.out)); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("parseGPUList = %+v, want %+v", got, c.want)
			}
		})
	}
}

func FuzzParseGPUList(f *testing.F) {
	f.Add([]byte("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-aaaa)\n  MIG 1g.5gb Device 0: (UUID: MIG-b)\n"))
	f.Add([]byte("GPU 1: (UUID: x)\nGPU 2: a (UUID:)\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, g := range parseGPUList(b) {
			if g.Index < 0 || g.Name == "" || strings.ContainsAny(g.Name, "\n") {
				t.Fatalf("parseGPUList(%q) gave %+v", b, g)
			}
		}
	})
}
