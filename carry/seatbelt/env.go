package seatbelt

import (
	"fmt"
	"strconv"
	"strings"
)

// ProxyURL is the door's address as the run's tools are given it.
func ProxyURL(port uint16) string { return "http://127.0.0.1:" + strconv.Itoa(int(port)) }

// replacedVariables are taken out of the environment the run inherits, in any
// letter case, and set anew by Env: a proxy inherited from the person's shell
// is not the door, and the sandbox would deny it.
var replacedVariables = []string{
	"http_proxy", "https_proxy", "all_proxy", "no_proxy", "ftp_proxy", "grpc_proxy",
	"npm_config_proxy", "npm_config_https_proxy", "npm_config_noproxy",
	"pip_proxy", "cargo_http_proxy",
}

// Env returns the run's environment: base (the person's or the agent's) with
// every common tool pointed at the door on port, and TMPDIR at the run's own
// temporary directory (unchanged when tmp is "").
//
//   - HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and their lowercase forms: curl,
//     wget, Go, Python (requests, urllib, httpx), Ruby, Rust's reqwest, git
//     and most others read one of them. NO_PROXY is empty: every destination,
//     loopback and private addresses too, is the door's to judge; one a tool
//     would reach directly the sandbox denies.
//   - npm_config_proxy and npm_config_https_proxy: npm does not read the
//     standard variables for its registry.
//   - PIP_PROXY: pip's own setting wins over a pip.conf proxy.
//   - http.proxy for git, given as GIT_CONFIG_COUNT/KEY/VALUE (numbered on
//     from any the environment already gives): it outranks a proxy set in
//     a repository's or the user's git configuration.
//   - JAVA_TOOL_OPTIONS and GRADLE_OPTS: the JVM reads no proxy variable,
//     only the http.proxyHost/Port and https.proxyHost/Port properties; they
//     are added after whatever options are already there.
//   - GRPC_PROXY and CARGO_HTTP_PROXY: gRPC's C core and cargo, each of
//     which prefers its own variable.
func Env(base []string, port uint16, tmp string) []string {
	url := ProxyURL(port)
	out := make([]string, 0, len(base)+24)
	var javaOpts, gradleOpts string
	gitCount := 0
	var gitConfig []string
next:
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		for _, r := range replacedVariables {
			if strings.EqualFold(k, r) {
				continue next
			}
		}
		switch k {
		case "TMPDIR":
			if tmp != "" {
				continue
			}
		case "JAVA_TOOL_OPTIONS":
			javaOpts = v
			continue
		case "GRADLE_OPTS":
			gradleOpts = v
			continue
		case "GIT_CONFIG_COUNT":
			if n, err := strconv.Atoi(v); err == nil && n >= 0 {
				gitCount = n
			}
			continue
		}
		if strings.HasPrefix(k, "GIT_CONFIG_KEY_") || strings.HasPrefix(k, "GIT_CONFIG_VALUE_") {
			gitConfig = append(gitConfig, kv)
			continue
		}
		out = append(out, kv)
	}
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		out = append(out, k+"="+url)
	}
	out = append(out, "NO_PROXY=", "no_proxy=")
	out = append(out,
		"npm_config_proxy="+url,
		"npm_config_https_proxy="+url,
		"PIP_PROXY="+url,
		"GRPC_PROXY="+url,
		"grpc_proxy="+url,
		"CARGO_HTTP_PROXY="+url,
	)
	// The git entries the environment gave that are within its count stay,
	// numbered as they were; the door's proxy comes next.
	for _, kv := range gitConfig {
		k, _, _ := strings.Cut(kv, "=")
		i := strings.LastIndexByte(k, '_')
		if n, err := strconv.Atoi(k[i+1:]); err == nil && n < gitCount {
			out = append(out, kv)
		}
	}
	out = append(out,
		"GIT_CONFIG_COUNT="+strconv.Itoa(gitCount+1),
		fmt.Sprintf("GIT_CONFIG_KEY_%d=http.proxy", gitCount),
		fmt.Sprintf("GIT_CONFIG_VALUE_%d=%s", gitCount, url),
	)
	jvm := JVMProxyOptions(port)
	out = append(out, "JAVA_TOOL_OPTIONS="+joinOpts(javaOpts, jvm), "GRADLE_OPTS="+joinOpts(gradleOpts, jvm))
	if tmp != "" {
		out = append(out, "TMPDIR="+tmp)
	}
	return out
}

// JVMProxyOptions are the system properties that send a JVM's HTTP and HTTPS
// connections to the door.
func JVMProxyOptions(port uint16) string {
	p := strconv.Itoa(int(port))
	return "-Dhttp.proxyHost=127.0.0.1 -Dhttp.proxyPort=" + p + " -Dhttps.proxyHost=127.0.0.1 -Dhttps.proxyPort=" + p
}

func joinOpts(have, add string) string {
	if strings.TrimSpace(have) == "" {
		return add
	}
	return have + " " + add
}
