-- wrk script for bench/run.sh: POSTs client credentials token requests, spreading HTTP Basic
-- authentication over many clients, and counts every answer that is not 2xx, keeping apart
-- the 503s of Tessera's in-flight cap (load shed, expected when overloaded).
--
-- BENCH_AUTH_FILE names a file of precomputed Authorization header values, one a line
-- ("Basic base64(id:secret)"). Each request is built once in init(), so request() only picks
-- the next client (round robin) and the generator stays cheap at 100,000 clients.
-- done() prints one line for run.sh to parse:
--   RESULT requests=.. duration_us=.. non2xx=.. shed=.. socket_errors=.. p50_us=.. p99_us=.. max_us=..
-- non2xx leaves out the shed answers; requests counts every answer.

local auth_file = os.getenv("BENCH_AUTH_FILE")
-- BENCH_CLOSE=1: every request asks for Connection: close, so each one opens a new
-- connection (and, over TLS, makes a new handshake).
local close = os.getenv("BENCH_CLOSE") == "1"
local body = "grant_type=client_credentials&scope=market-data-api"

local reqs = {}
local count = 0
local next_index = 0

-- Per-thread state that done() reads back; globals, since thread:get reads globals.
non2xx = 0
shed = 0
thread_id = 0

local threads = {}

function setup(thread)
  thread:set("thread_id", #threads)
  table.insert(threads, thread)
end

function init(args)
  assert(auth_file, "set BENCH_AUTH_FILE")
  local f = assert(io.open(auth_file, "r"))
  for line in f:lines() do
    if line ~= "" then
      count = count + 1
      local headers = {
        ["Content-Type"] = "application/x-www-form-urlencoded",
        ["Authorization"] = line,
      }
      if close then
        headers["Connection"] = "close"
      end
      reqs[count] = wrk.format("POST", nil, headers, body)
    end
  end
  f:close()
  assert(count > 0, "no Authorization values in " .. auth_file)
  -- Threads start at different clients.
  next_index = (thread_id * 7919) % count
end

function request()
  next_index = next_index % count + 1
  return reqs[next_index]
end

-- The body of the in-flight cap's answer, and of no other 503 (a stale registry's says
-- otherwise).
local busy = "server busy"

function response(status, headers, body)
  if status == 503 and body and string.find(body, busy, 1, true) then
    shed = shed + 1
  elseif status < 200 or status > 299 then
    non2xx = non2xx + 1
  end
end

function done(summary, latency, requests)
  local bad, shed_total = 0, 0
  for _, thread in ipairs(threads) do
    bad = bad + thread:get("non2xx")
    shed_total = shed_total + thread:get("shed")
  end
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d non2xx=%d shed=%d socket_errors=%d p50_us=%d p99_us=%d max_us=%d\n",
    summary.requests, summary.duration, bad, shed_total,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
