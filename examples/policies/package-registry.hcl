# Install dependencies from the public package registries: npm, PyPI, the Go
# module proxy and crates.io. Only HTTPS (443) is let through.
name  = "package registries"
mode  = "enforce"
ports = [443]

allow = [
  # npm and yarn
  "registry.npmjs.org",
  "registry.yarnpkg.com",

  # Python: the index and the host the files are served from
  "pypi.org",
  "files.pythonhosted.org",

  # Go: the module proxy and the checksum database. Modules the proxy cannot
  # serve (GOPRIVATE, GOPROXY=direct) need their git host too: see git-host.hcl.
  "proxy.golang.org",
  "sum.golang.org",

  # Rust: the sparse index and the crate downloads
  "index.crates.io",
  "static.crates.io",
  "crates.io",
]

# Everything else is refused, including publishing endpoints on other hosts.
# A private registry inside your network also needs its address range:
# allow_cidrs = ["10.20.0.0/16"]
