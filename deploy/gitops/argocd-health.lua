-- Argo CD health check for taobrev.io/TaoBrevJob (a one-shot training run).
-- Install as resource.customizations.health.taobrev.io_TaoBrevJob in argocd-cm
-- (see argocd-cm-patch.yaml). Lua 5.1, as Argo CD's gopher-lua runs it.
--   Progressing  no status yet, the run is in progress, or the operator is still working
--                (Reconciling=True, e.g. uploading results or deleting the instance)
--   Healthy      outcome Succeeded and the instance released (or Ready=True)
--   Degraded     outcome Failed or Canceled, or Stalled=True (a permanent error)
local hs = {}

local function condition(status, ctype)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == ctype then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

-- The current attempt's exit code: attempts[] ends with the current attempt; status written
-- by releases before sub-records (not yet rewritten) has it flat.
local function exit_code(status)
  if status.attempts ~= nil and #status.attempts > 0 then
    local run = status.attempts[#status.attempts].run
    if run ~= nil and run.exitCode ~= nil then
      return run.exitCode
    end
  end
  return status.exitCode
end

-- "phase Running, reason X: message" from whatever the status has.
local function describe(status, fallback)
  local parts = {}
  if status.phase ~= nil then
    table.insert(parts, "phase " .. status.phase)
  end
  if status.outcome ~= nil then
    table.insert(parts, "outcome " .. status.outcome)
  end
  if status.reason ~= nil and status.reason ~= "" then
    table.insert(parts, "reason " .. status.reason)
  end
  if status.failureClass ~= nil then
    table.insert(parts, "failure class " .. status.failureClass)
  end
  local code = exit_code(status)
  if code ~= nil then
    table.insert(parts, "exit code " .. tostring(code))
  end
  local text = table.concat(parts, ", ")
  local message = status.message
  if message == nil or message == "" then
    message = fallback
  end
  if message ~= nil and message ~= "" then
    if text ~= "" then
      text = text .. ": " .. message
    else
      text = message
    end
  end
  return text
end

if obj.status == nil or (obj.status.phase == nil and obj.status.conditions == nil) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to pick up the job"
  return hs
end

local status = obj.status
local stalled = condition(status, "Stalled")
local reconciling = condition(status, "Reconciling")
local ready = condition(status, "Ready")
local released = condition(status, "InstanceReleased")

if status.outcome == "Failed" or status.outcome == "Canceled" or is_true(stalled) then
  hs.status = "Degraded"
  local fallback = nil
  if is_true(stalled) then
    fallback = stalled.message
  end
  hs.message = describe(status, fallback)
  if is_true(reconciling) then
    hs.message = hs.message .. " (cleaning up)"
  end
  return hs
end

if is_true(ready) or (status.outcome == "Succeeded" and (is_true(released) or status.phase == "Deleted")) then
  if not is_true(reconciling) then
    hs.status = "Healthy"
    hs.message = describe(status, "Succeeded")
    return hs
  end
end

hs.status = "Progressing"
local fallback = nil
if reconciling ~= nil then
  fallback = reconciling.message
end
hs.message = describe(status, fallback)
return hs
