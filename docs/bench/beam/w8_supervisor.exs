# W8 on the BEAM: supervisors.
#   elixir w8_supervisor.exs
# 1. A one_for_one Supervisor with one permanent GenServer, killed 10,000
#    times, each time waiting until it has started again (also 1,000 times:
#    OTP keeps the restarts of the intensity period in a list it walks on
#    every restart, so the cost per restart grows with their number; and
#    with a plain spawn_link worker instead of a GenServer).
# 2. 100,000 GenServer children started one after another under a
#    DynamicSupervisor, and under a simple_one_for_one :supervisor.
# 3. A DynamicSupervisor with 10,000 children stopped gracefully.
# gotp's side: BenchmarkW8Restart, BenchmarkW8DynamicStart and
# BenchmarkW8DynamicShutdown in package supervisor.
Code.require_file("anchor.exs", __DIR__)

defmodule W8.Announcing do
  use GenServer
  def start_link(me), do: GenServer.start_link(__MODULE__, me)

  @impl true
  def init(me) do
    send(me, {:started, self()})
    {:ok, me}
  end
end

defmodule W8.Plain do
  def start_link(me) do
    pid = spawn_link(fn ->
      send(me, {:started, self()})
      Process.sleep(:infinity)
    end)
    {:ok, pid}
  end
end

defmodule W8.Quiet do
  use GenServer
  def start_link(arg), do: GenServer.start_link(__MODULE__, arg)
  @impl true
  def init(arg), do: {:ok, arg}
end

defmodule W8.Simple do
  @behaviour :supervisor
  def start_link, do: :supervisor.start_link(__MODULE__, [])

  @impl true
  def init([]) do
    flags = %{strategy: :simple_one_for_one, intensity: 1, period: 5}
    {:ok, {flags, [%{id: :quiet, start: {W8.Quiet, :start_link, []}, restart: :permanent}]}}
  end
end

defmodule W8 do
  def kill(pid, 0), do: pid

  def kill(pid, n) do
    Process.exit(pid, :kill)
    receive do: ({:started, next} -> kill(next, n - 1))
  end

  def start_dynamic(_sup, 0), do: :ok
  def start_dynamic(sup, n), do: ({:ok, _} = DynamicSupervisor.start_child(sup, {W8.Quiet, n}); start_dynamic(sup, n - 1))

  def start_simple(_sup, 0), do: :ok
  def start_simple(sup, n), do: ({:ok, _} = :supervisor.start_child(sup, [n]); start_simple(sup, n - 1))
end

GotpBench.describe("w8_supervisor")
kills = GotpBench.size(10_000)
children = GotpBench.size(100_000)
stopping = GotpBench.size(10_000)

restarts = fn name, worker, kills ->
  me = self()
  spec = [%{id: :w, start: {worker, :start_link, [me]}, restart: :permanent}]
  {:ok, sup} = Supervisor.start_link(spec, strategy: :one_for_one, max_restarts: kills * 100, max_seconds: 1)
  first = receive do: ({:started, p} -> p)
  t0 = GotpBench.clock()
  W8.kill(first, kills)
  GotpBench.line(name, kills, GotpBench.clock() - t0, "-", restarts: kills)
  Process.unlink(sup)
  Supervisor.stop(sup)
  GotpBench.pause()
end

restarts.("W8_supervisor_restart_genserver", W8.Announcing, kills)
restarts.("W8_supervisor_restart_bare_spawn_link", W8.Plain, kills)
few = max(1, div(kills, 10))
restarts.("W8_supervisor_restart_genserver_#{div(few, 1000)}k", W8.Announcing, few)

# DynamicSupervisor: 100,000 starts, and the memory they take.
:erlang.garbage_collect()
{:ok, dyn} = DynamicSupervisor.start_link(strategy: :one_for_one)
mem0 = :erlang.memory(:processes)
t0 = GotpBench.clock()
W8.start_dynamic(dyn, children)
elapsed = GotpBench.clock() - t0
:erlang.garbage_collect(dyn)
GotpBench.line("W8_dynamic_supervisor_start_child", children, elapsed,
  GotpBench.bytes_each(:erlang.memory(:processes) - mem0, children, "child"), children: children)
# Not timed: a graceful stop of 100,000 children takes Elixir 1.14 minutes.
Process.unlink(dyn)
Process.exit(dyn, :kill)
GotpBench.await(fn -> :erlang.system_info(:process_count) < 1000 end)
GotpBench.pause()

# A graceful stop of 10,000 children.
{:ok, dyn} = DynamicSupervisor.start_link(strategy: :one_for_one)
W8.start_dynamic(dyn, stopping)
Process.unlink(dyn)
GotpBench.pause()
t0 = GotpBench.clock()
DynamicSupervisor.stop(dyn)
GotpBench.line("W8_dynamic_supervisor_shutdown_#{div(stopping, 1000)}k", stopping, GotpBench.clock() - t0, "-",
  children: stopping)
GotpBench.pause()

# simple_one_for_one: 100,000 starts.
:erlang.garbage_collect()
{:ok, simple} = W8.Simple.start_link()
mem0 = :erlang.memory(:processes)
t0 = GotpBench.clock()
W8.start_simple(simple, children)
elapsed = GotpBench.clock() - t0
:erlang.garbage_collect(simple)
GotpBench.line("W8_simple_one_for_one_start_child", children, elapsed,
  GotpBench.bytes_each(:erlang.memory(:processes) - mem0, children, "child"), children: children)
