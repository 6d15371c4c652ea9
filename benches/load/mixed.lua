-- A mixed read/write load for wrk: 60% search, 20% remember, 10% list, 10% context, over
-- 20 users. Every remember is a new fact (a counter in the text), so none is a duplicate.
-- Statuses are tallied per thread and printed at the end.
local threads = {}
local counter = 0
local key = os.getenv("ENGRAM_KEY")
local queries = { "where does the user live", "favourite food", "hobbies and sports",
  "the user's job", "travel plans", "family members", "music taste", "pets" }

function setup(thread)
  thread:set("id", #threads)
  table.insert(threads, thread)
end

function init(args)
  statuses = {}
  math.randomseed(os.time() + id)
end

local function user() return "user-" .. math.random(0, 19) end

request = function()
  counter = counter + 1
  local h = { ["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. key }
  local r = math.random()
  if r < 0.6 then
    local body = string.format('{"query": "%s", "user_id": "%s", "limit": 10}',
      queries[math.random(#queries)], user())
    return wrk.format("POST", "/v1/search", h, body)
  elseif r < 0.8 then
    local body = string.format(
      '{"content": "The user noted item %d-%d from thread %d.", "user_id": "%s"}',
      id, counter, id, user())
    return wrk.format("POST", "/v1/memories", h, body)
  elseif r < 0.9 then
    return wrk.format("GET", "/v1/memories?user_id=" .. user() .. "&limit=20", h)
  else
    local body = string.format('{"user_id": "%s", "query": "%s", "token_budget": 500}',
      user(), queries[math.random(#queries)])
    return wrk.format("POST", "/v1/context", h, body)
  end
end

response = function(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end

done = function(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    local s = t:get("statuses")
    for code, n in pairs(s) do total[code] = (total[code] or 0) + n end
  end
  local parts = {}
  for code, n in pairs(total) do table.insert(parts, code .. "=" .. n) end
  table.sort(parts)
  io.write(string.format("statuses: %s\n", table.concat(parts, " ")))
  io.write(string.format("requests: %d  errors(socket): connect=%d read=%d write=%d timeout=%d\n",
    summary.requests, summary.errors.connect, summary.errors.read, summary.errors.write,
    summary.errors.timeout))
  io.write(string.format("throughput: %.1f req/s  p50: %.1f ms  p90: %.1f ms  p99: %.1f ms  max: %.1f ms\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000,
    latency:percentile(90) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
