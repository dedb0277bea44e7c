-- wrk script for bench/api.sh: GETs a protected endpoint of examples/protected_apis.rs with a
-- small set of bearer tokens in turn, as a few cached client tokens would arrive, and counts
-- every answer that is not 2xx.
--
-- BENCH_TOKEN_FILE names a file of access tokens, one a line. Each request is built once in
-- init(), so request() only picks the next token (round robin).
-- done() prints one line for api.sh to parse:
--   RESULT requests=.. duration_us=.. non2xx=.. socket_errors=.. p50_us=.. p99_us=.. max_us=..

local token_file = os.getenv("BENCH_TOKEN_FILE")

local reqs = {}
local count = 0
local next_index = 0

-- Per-thread state that done() reads back; globals, since thread:get reads globals.
non2xx = 0
thread_id = 0

local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function init(args)
  assert(token_file, "set BENCH_TOKEN_FILE")
  local f = assert(io.open(token_file, "r"))
  for line in f:lines() do
    if line ~= "" then
      count = count + 1
      reqs[count] = wrk.format("GET", nil, { ["Authorization"] = "Bearer " .. line }, nil)
    end
  end
  f:close()
  assert(count > 0, "no tokens in " .. token_file)
  next_index = thread_id % count
end

function request()
  next_index = next_index % count + 1
  return reqs[next_index]
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  end
end

function done(summary, latency, requests)
  local bad = 0
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non2xx")
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d non2xx=%d socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, bad,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
