-- wrk script for bench/run.sh --auth private_key_jwt: POSTs client credentials token requests
-- authenticated with a client assertion (RFC 7523 section 2.2), each assertion sent once,
-- since the server refuses a jti it has seen.
--
-- BENCH_ASSERTION_FILE names a file of signed assertions, one a line (made by
-- examples/mint_assertions.rs). With BENCH_THREADS threads (wrk -t, default 1), thread k
-- sends lines k+1, k+1+BENCH_THREADS, ..., so no two threads send the same one. Each request
-- is built once in init(), so request() costs the generator no more than bench/token.lua's.
-- A thread that runs out starts over: those requests are replays, refused, and counted as
-- non-2xx, so a run with too few assertions is INVALID rather than silently short; done()
-- also says how many were resent.
-- done() prints one line for run.sh to parse, as bench/token.lua does:
--   RESULT requests=.. duration_us=.. non2xx=.. socket_errors=.. p50_us=.. p99_us=.. max_us=..

local assertion_file = os.getenv("BENCH_ASSERTION_FILE")
local thread_count = tonumber(os.getenv("BENCH_THREADS") or "1")
local prefix = "grant_type=client_credentials&scope=market-data-api"
  .. "&client_assertion_type=urn%3Aietf%3Aparams%3Aoauth%3Aclient-assertion-type%3Ajwt-bearer"
  .. "&client_assertion="
local headers = { ["Content-Type"] = "application/x-www-form-urlencoded" }

local reqs = {}
local count = 0
local next_index = 0

-- Per-thread state that done() reads back; globals, since thread:get reads globals.
non2xx = 0
resent = 0
thread_id = 0

local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function init(args)
  assert(assertion_file, "set BENCH_ASSERTION_FILE")
  local f = assert(io.open(assertion_file, "r"))
  local line_number = 0
  for line in f:lines() do
    if line ~= "" then
      if line_number % thread_count == thread_id then
        count = count + 1
        reqs[count] = wrk.format("POST", nil, headers, prefix .. line)
      end
      line_number = line_number + 1
    end
  end
  f:close()
  assert(count > 0, "no assertions for thread " .. thread_id .. " in " .. assertion_file)
end

function request()
  next_index = next_index + 1
  if next_index > count then
    resent = resent + 1
    return reqs[(next_index - 1) % count + 1]
  end
  return reqs[next_index]
end

function response(status, headers, body)
  if status < 200 or status > 299 then
    non2xx = non2xx + 1
  end
end

function done(summary, latency, requests)
  local bad, again = 0, 0
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non2xx")
    again = again + thread:get("resent")
  end
  if again > 0 then
    io.stderr:write(string.format("assertion.lua: ran out of assertions, %d sent again\n", again))
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d non2xx=%d socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, bad,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
