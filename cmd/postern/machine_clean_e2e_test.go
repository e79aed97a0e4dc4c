//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/postern-dev/postern/carry/netwall"
	"github.com/postern-dev/postern/internal/testhosts"
	"github.com/postern-dev/postern/remote-agent/agent"
)

// agentVariant is the built postern with bytes appended: another agent
// (another hash) that runs the same. Written by child processes, so no
// descriptor of it open for writing is ever inherited here.
func agentVariant(t testing.TB, dir, tag string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, agent.BinaryName("linux", goarch()))
	if err := testhosts.CopyExecutable(binFor(t), p); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("sh", "-c", `printf '\n%s\n' "$1" >> "$2"`, "sh", tag, p).CombinedOutput(); err != nil {
		t.Fatalf("append to %s: %v: %s", p, err, out)
	}
	return p
}

func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return "amd64"
	}
	return strings.TrimSpace(string(out))
}

// agentDirs lists the agent versions' directories under a remote home.
func agentDirs(t testing.TB, home string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(home, ".cache", "postern", "agents", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range m {
		names = append(names, filepath.Base(p))
	}
	slices.Sort(names)
	return names
}

// Without an sftp subsystem (sshd with no Subsystem line), the agent is
// written by 'cat >' over an exec channel, checked by its hash and used; one
// changed on the remote is noticed (stat and cat in place of sftp) and
// installed again; and an install that fails leaves no empty directory.
func TestRemoteAgentWithoutSFTP(t *testing.T) {
	// An agent directory with no room (a 256 KiB tmpfs), mounted before sshd
	// starts so that its sessions' mount namespace has it.
	small := filepath.Join(t.TempDir(), "small")
	if err := os.MkdirAll(small, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=256k"); err != nil {
		t.Fatalf("mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
	r := newRemoteLabWith(t, sshdOptions{NoSFTP: true})
	if out, err := exec.Command("ssh", "-s", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
		"-i", r.C.Key, "root@"+r.Remote.Addr.String(), "sftp").CombinedOutput(); err == nil {
		t.Fatalf("the test sshd serves sftp: %s", out)
	}
	r.addAndProbe(t, "nosftp")
	files := agentFiles(t, r.Remote.Home)
	if len(files) != 1 {
		t.Fatalf("agents on the remote: %v", files)
	}
	want := sha256File(t, binFor(t))
	if got := sha256File(t, files[0]); got != want || filepath.Base(filepath.Dir(files[0])) != want {
		t.Fatalf("the agent written without sftp hashes to %s in %s, want %s", got, files[0], want)
	}
	st, err := os.Stat(files[0])
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("agent file mode: %v %v", st.Mode(), err)
	}
	pol := r.policy(t)
	stdout, stderr, code := r.C.postern(t, "run", "--machine", "nosftp", "--policy", pol, "--resolver", r.resolver(), "--",
		"curl", "-sS", "--max-time", "10", "http://upstream.test/")
	var rep testhosts.EchoReply
	if code != 0 || json.Unmarshal([]byte(stdout), &rep) != nil || rep.ServedBy != "upstream" {
		t.Fatalf("run without sftp: exit %d\nstdout: %s\nstderr: %s", code, stdout, stderr)
	}
	// The agent replaced on the remote, same size: seen through stat and
	// cat, reinstalled, and what runs is the agent again.
	size := st.Size()
	if out, err := exec.Command("sh", "-c", `head -c "$1" /dev/zero > "$2.new" && chmod 700 "$2.new" && mv "$2.new" "$2"`, "sh", fmt.Sprint(size), files[0]).CombinedOutput(); err != nil {
		t.Fatalf("replace the agent: %v: %s", err, out)
	}
	_, stderr, code = r.C.postern(t, "run", "--machine", "nosftp", "--policy", pol, "--resolver", r.resolver(), "--", "true")
	if code != 0 || !strings.Contains(stderr, "was changed since install") || !strings.Contains(stderr, "reinstalled") {
		t.Fatalf("run after the agent was replaced: exit %d, stderr:\n%s", code, stderr)
	}
	if got := sha256File(t, files[0]); got != want {
		t.Fatalf("reinstalled agent hashes to %s, want %s", got, want)
	}

	// With no room in the agent directory the install fails before writing,
	// and the version's directory it made is gone again.
	r.C.mustPostern(t, "machine", "add", "tiny", "--ssh", "nosftp-alias", "--agent-dir", small)
	_, stderr, code = r.C.postern(t, "machine", "probe-confinement", "tiny")
	if code == 0 || !strings.Contains(stderr, "no room for the agent") {
		t.Fatalf("probe with no room: exit %d, stderr:\n%s", code, stderr)
	}
	left, err := os.ReadDir(small)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Fatalf("a failed install left %v in the agent directory", left)
	}
}

// Installing keeps the two newest agent versions; 'machine clean' lists and
// removes every agent and the probe's image (in a podman storage of the
// test's own), --dry-run removes nothing; 'machine rm' says what stays, and
// 'machine rm --clean' removes it.
func TestMachineClean(t *testing.T) {
	testhosts.EndToEnd(t)
	if _, err := exec.LookPath("podman"); err != nil {
		t.Fatalf("podman is needed (apt-get install podman): %v", err)
	}
	store := t.TempDir()
	storageConf := filepath.Join(store, "storage.conf")
	conf := fmt.Sprintf("[storage]\ndriver = \"vfs\"\ngraphroot = %q\nrunroot = %q\n", filepath.Join(store, "graph"), filepath.Join(store, "run"))
	if err := os.WriteFile(storageConf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	podman := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("podman", append([]string{"--root", filepath.Join(store, "graph"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}, args...)...)
		cmd.Env = append(os.Environ(), "CONTAINERS_STORAGE_CONF="+storageConf)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	t.Cleanup(func() {
		exec.Command("podman", "--root", filepath.Join(store, "graph"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs", "system", "reset", "-f").Run()
	})
	// An image named as the probe names its own.
	rootfs := filepath.Join(t.TempDir(), "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "hello"), []byte("probe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tarball := filepath.Join(t.TempDir(), "rootfs.tar")
	if out, err := exec.Command("tar", "-C", rootfs, "-cf", tarball, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	const probeImage = "localhost/postern-probe:0123456789abcdef"
	podman("import", tarball, probeImage)

	r := newRemoteLabWith(t, sshdOptions{Env: []string{"CONTAINERS_STORAGE_CONF=" + storageConf}})
	r.C.writeSSH(t, "config", fmt.Sprintf("Host far-alias\n  HostName %s\n  User root\n  IdentityFile ~/.ssh/id_ed25519\n", r.Remote.Addr))
	r.C.trust(t, r.Remote.Addr.String(), r.Remote.HostPub)
	r.C.mustPostern(t, "machine", "add", "far", "--ssh", "far-alias")

	// Three builds of postern, one after the other, each installing its agent.
	var hashes []string
	for i := range 3 {
		dir := filepath.Join(t.TempDir(), fmt.Sprintf("build%d", i))
		bin := agentVariant(t, dir, fmt.Sprintf("build %d", i))
		hashes = append(hashes, sha256File(t, bin))
		r.C.Env = []string{"POSTERN_AGENT_DIR=" + dir}
		r.C.mustPostern(t, "machine", "probe-confinement", "far")
	}
	kept := slices.Sorted(slices.Values(hashes[1:]))
	if got := agentDirs(t, r.Remote.Home); !slices.Equal(got, kept) {
		t.Fatalf("agents on the remote after three installs: %v, want the last two %v", got, kept)
	}
	var v machineView
	if err := json.Unmarshal([]byte(r.C.mustPostern(t, "machine", "show", "far", "--json")), &v); err != nil {
		t.Fatal(err)
	}
	var recorded []string
	for _, a := range v.Agents {
		recorded = append(recorded, a.Hash)
	}
	slices.Sort(recorded)
	if !slices.Equal(recorded, kept) {
		t.Fatalf("agents recorded for far: %v, want %v", recorded, kept)
	}

	out := r.C.mustPostern(t, "machine", "clean", "far", "--dry-run")
	for _, h := range kept {
		if !strings.Contains(out, "would remove  agent") || !strings.Contains(out, h) {
			t.Fatalf("clean --dry-run does not list agent %s:\n%s", h, out)
		}
	}
	if !strings.Contains(out, probeImage+" (podman)") {
		t.Fatalf("clean --dry-run does not list the probe image:\n%s", out)
	}
	if got := agentDirs(t, r.Remote.Home); !slices.Equal(got, kept) || !strings.Contains(podman("images", "--format", "{{.Repository}}:{{.Tag}}"), probeImage) {
		t.Fatalf("--dry-run removed something: agents %v", got)
	}

	out = r.C.mustPostern(t, "machine", "clean", "far")
	if !strings.Contains(out, "removed  agent") || !strings.Contains(out, "removed  probe-image") || strings.Contains(out, "not removed") {
		t.Fatalf("clean:\n%s", out)
	}
	if got := agentDirs(t, r.Remote.Home); len(got) != 0 {
		t.Fatalf("agents left after clean: %v", got)
	}
	if imgs := podman("images", "--format", "{{.Repository}}:{{.Tag}}"); strings.Contains(imgs, "postern-probe") {
		t.Fatalf("probe image left after clean:\n%s", imgs)
	}
	var after machineView
	if err := json.Unmarshal([]byte(r.C.mustPostern(t, "machine", "show", "far", "--json")), &after); err != nil || len(after.Agents) != 0 {
		t.Fatalf("agents still recorded after clean: %+v %v", after.Agents, err)
	}
	// Nothing left: said so. The next run installs the agent again.
	if out := r.C.mustPostern(t, "machine", "clean", "far"); !strings.Contains(out, "nothing of postern's found on far") {
		t.Fatalf("clean of a clean machine:\n%s", out)
	}
	r.C.mustPostern(t, "run", "--machine", "far", "--", "true")
	if got := agentDirs(t, r.Remote.Home); !slices.Equal(got, []string{hashes[2]}) {
		t.Fatalf("after a run: agents %v, want %s", got, hashes[2])
	}

	// On local: the probe's image in the same storage, through podman here.
	podman("import", tarball, probeImage)
	r.C.Env = []string{"CONTAINERS_STORAGE_CONF=" + storageConf}
	// A walled run as root keeps the netfilter hooks' namespace here
	// (netwall.HooksHolder), as this does; clean local lists and removes
	// it too.
	root := os.Geteuid() == 0
	if root {
		if err := netwall.HoldHooks(); err != nil {
			t.Fatal(err)
		}
	}
	out = r.C.mustPostern(t, "machine", "clean", "local", "--dry-run")
	if !hasLeftoverLine(out, "would remove", "probe-image", probeImage+" (podman)") || root && !hasLeftoverLine(out, "would remove", "netfilter-hooks", netwall.HooksHolder) {
		t.Fatalf("clean local --dry-run:\n%s", out)
	}
	out = r.C.mustPostern(t, "machine", "clean", "local")
	if !hasLeftoverLine(out, "removed", "probe-image", probeImage+" (podman)") || root && !hasLeftoverLine(out, "removed", "netfilter-hooks", netwall.HooksHolder) {
		t.Fatalf("clean local:\n%s", out)
	}
	if imgs := podman("images", "--format", "{{.Repository}}:{{.Tag}}"); strings.Contains(imgs, "postern-probe") {
		t.Fatalf("probe image left after clean local:\n%s", imgs)
	}
	if root && netwall.HooksHeld() {
		t.Fatalf("%s still holds a namespace after clean local", netwall.HooksHolder)
	}

	// machine rm leaves the agent and says so; rm --clean removes it.
	_, stderr, code := r.C.postern(t, "machine", "rm", "far")
	if code != 0 || !strings.Contains(stderr, "stays there") || !strings.Contains(stderr, "machine rm --clean far") {
		t.Fatalf("machine rm: exit %d, stderr:\n%s", code, stderr)
	}
	if len(agentDirs(t, r.Remote.Home)) != 1 {
		t.Fatal("machine rm removed the agent")
	}
	r.C.mustPostern(t, "machine", "add", "far", "--ssh", "far-alias")
	out = r.C.mustPostern(t, "machine", "rm", "--clean", "far")
	if !strings.Contains(out, "removed  agent") || !strings.Contains(out, "removed far") {
		t.Fatalf("machine rm --clean:\n%s", out)
	}
	if got := agentDirs(t, r.Remote.Home); len(got) != 0 {
		t.Fatalf("agents left after rm --clean: %v", got)
	}
	if _, _, code := r.C.postern(t, "machine", "show", "far"); code == 0 {
		t.Fatal("far is still known after rm --clean")
	}
}

// hasLeftoverLine says whether the leftovers' table out has a row of state,
// kind and what, whatever the columns' widths.
func hasLeftoverLine(out, state, kind, what string) bool {
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(line, state+" ")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) >= 3 && f[0] == kind && strings.Join(f[2:], " ") == what {
			return true
		}
	}
	return false
}
