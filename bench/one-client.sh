# Sourced by bench/instructions.sh, kernel.sh, paired.sh and pgo.sh, with $bin set to the
# tessera binary: a scratch directory $work (removed on exit, with the server $server_pid if
# one runs), a SQLite database there with a signing key, the plan `bench` and one client on
# it ($id, $secret), $work/tessera.toml, which serves that database on a free port with the
# background work an hour apart, so that no timer fires during a measurement, and
# $work/token.lua, a wrk script whose every request asks that client's token.

work=$(mktemp -d)
server_pid=""
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

export TESSERA_DATABASE_URL="sqlite://$work/tessera.db"
"$bin" keys rotate --activate-in 0 >/dev/null
"$bin" plan set bench --scopes "market-data-api news-api" >/dev/null
"$bin" client create --plan bench --json >"$work/client.json"
unset TESSERA_DATABASE_URL
id=$(jq -r .client_id "$work/client.json")
secret=$(jq -r .client_secret "$work/client.json")
cat >"$work/tessera.toml" <<EOF
database = "sqlite://$work/tessera.db"
listen = "127.0.0.1:0"
sync-interval = 3600
housekeeping-interval = 3600
full-reload-interval = 3600
max-staleness = 7200
EOF
basic=$(printf '%s:%s' "$id" "$secret" | base64 -w0)
cat >"$work/token.lua" <<EOF
wrk.method = "POST"
wrk.body = "grant_type=client_credentials&scope=market-data-api%20news-api"
wrk.headers["Content-Type"] = "application/x-www-form-urlencoded"
wrk.headers["Authorization"] = "Basic $basic"
EOF
