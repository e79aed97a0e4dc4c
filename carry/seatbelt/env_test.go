package seatbelt

import (
	"slices"
	"strings"
	"testing"
)

func envMap(t *testing.T, env []string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, kv := range env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("entry %q has no '='", kv)
		}
		if _, dup := m[k]; dup {
			t.Fatalf("%s is set twice in %q", k, env)
		}
		m[k] = v
	}
	return m
}

func TestEnv(t *testing.T) {
	base := []string{
		"HOME=/Users/me", "PATH=/usr/bin:/bin", "TMPDIR=/var/folders/xy/abc/T/",
		// What the person's shell may already have: replaced, whatever the case.
		"http_proxy=http://corp:3128", "HTTPS_PROXY=http://corp:3128", "All_Proxy=socks5://corp:1080",
		"NO_PROXY=localhost,.corp", "no_proxy=*", "NPM_CONFIG_PROXY=http://corp:3128", "pip_proxy=http://corp:3128",
		// What the person set for themselves: kept, with the door's after it.
		"JAVA_TOOL_OPTIONS=-Xmx2g", "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=user.name", "GIT_CONFIG_VALUE_0=Me",
		// Beyond the count: git ignores it, and so it goes.
		"GIT_CONFIG_KEY_5=core.fsmonitor", "GIT_CONFIG_VALUE_5=/tmp/x",
	}
	got := Env(base, 41234, "/var/folders/xy/abc/T/postern-run-1")
	m := envMap(t, got)
	door := "http://127.0.0.1:41234"
	want := map[string]string{
		"HTTP_PROXY": door, "HTTPS_PROXY": door, "ALL_PROXY": door,
		"http_proxy": door, "https_proxy": door, "all_proxy": door,
		"NO_PROXY": "", "no_proxy": "",
		"npm_config_proxy": door, "npm_config_https_proxy": door,
		"PIP_PROXY": door, "GRPC_PROXY": door, "grpc_proxy": door, "CARGO_HTTP_PROXY": door,
		"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "user.name", "GIT_CONFIG_VALUE_0": "Me",
		"GIT_CONFIG_KEY_1": "http.proxy", "GIT_CONFIG_VALUE_1": door,
		"JAVA_TOOL_OPTIONS": "-Xmx2g -Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=41234 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=41234",
		"GRADLE_OPTS":       "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=41234 -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=41234",
		"TMPDIR":            "/var/folders/xy/abc/T/postern-run-1",
		"HOME":              "/Users/me", "PATH": "/usr/bin:/bin",
	}
	for k, v := range want {
		if got, ok := m[k]; !ok || got != v {
			t.Errorf("%s = %q (set %v), want %q", k, got, ok, v)
		}
	}
	for k := range m {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected %s=%q", k, m[k])
		}
	}
	for _, gone := range []string{"All_Proxy", "NPM_CONFIG_PROXY", "pip_proxy", "GIT_CONFIG_KEY_5"} {
		if _, ok := m[gone]; ok {
			t.Errorf("%s was kept", gone)
		}
	}
}

func TestEnvMinimal(t *testing.T) {
	// No TMPDIR for the run: the inherited one stays. No git entries: the
	// door's is the first.
	m := envMap(t, Env([]string{"TMPDIR=/tmp/x", "GIT_CONFIG_COUNT=bogus"}, 8080, ""))
	if m["TMPDIR"] != "/tmp/x" {
		t.Errorf("TMPDIR = %q", m["TMPDIR"])
	}
	if m["GIT_CONFIG_COUNT"] != "1" || m["GIT_CONFIG_KEY_0"] != "http.proxy" || m["GIT_CONFIG_VALUE_0"] != "http://127.0.0.1:8080" {
		t.Errorf("git: %v", m)
	}
	if m["JAVA_TOOL_OPTIONS"] != JVMProxyOptions(8080) {
		t.Errorf("JAVA_TOOL_OPTIONS = %q", m["JAVA_TOOL_OPTIONS"])
	}
	if !slices.Contains(Env(nil, 1, ""), "HTTPS_PROXY=http://127.0.0.1:1") {
		t.Error("an empty base gets no proxy")
	}
}
