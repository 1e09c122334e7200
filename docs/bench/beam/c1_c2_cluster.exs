# The Erlang distribution side of gotp's C1/C2 benchmarks across OS
# processes (cluster/procs_bench_test.go): three BEAM nodes, each its own
# OS process, over Erlang distribution (TCP on loopback), measuring what the
# gotp benchmarks measure, the same way.
#
#   elixir --sname c1a --erl "-kernel inet_dist_listen_min 31900 inet_dist_listen_max 31999" docs/bench/beam/c1_c2_cluster.exs
#
# Node a is this script; b and c are started with :peer. One line per
# figure, "name key=value ...":
#   C1_send        one-way sends from a to a counting process on b (1,000,000)
#   C1_call        GenServer.call from a to a server on b, by pid (20,000 sequential)
#   C1_call_named  the same to the name {adder, b}
#   C2_join        a process on a joins a pg group; c's pg monitor tells a (200)
#   C2_killed      c's OS process gets kill -9; time until a has nodedown
#                  (5 times, c started afresh each time; net_ticktime 4, which
#                  only bounds a silent partition: a closed connection tells
#                  at once)
# The sitting that runs it beside the gotp benchmarks is
# docs/bench/cluster-sitting.sh.

defmodule ClusterBeam do
  def now, do: System.monotonic_time(:nanosecond)

  def line(name, kv) do
    IO.puts(name <> " " <> Enum.map_join(kv, " ", fn {k, v} -> "#{k}=#{fmt(v)}" end))
  end

  defp fmt(v) when is_float(v), do: :erlang.float_to_binary(v, decimals: 2)
  defp fmt(v), do: to_string(v)

  def pct(sorted, p), do: Enum.at(sorted, min(length(sorted) - 1, div(length(sorted) * p, 100)))

  # A peer node of this one, with the modules below loaded on it.
  def peer(name, bins) do
    dist = ~w(-kernel inet_dist_listen_min 31900 inet_dist_listen_max 31999 -kernel net_ticktime 4)c
    # BEAM_PEER_ARGS: more emulator flags for the peers, e.g. "+sbwt none
    # +sbwtdcpu none +sbwtdio none" to turn off the schedulers' busy wait
    # (give the same flags to this node with elixir --erl).
    extra = System.get_env("BEAM_PEER_ARGS", "") |> String.split() |> Enum.map(&String.to_charlist/1)
    args = Enum.flat_map(:code.get_path(), &[~c"-pa", &1]) ++ dist ++ extra
    {:ok, _pid, node} = :peer.start(%{name: name, args: args})
    for {m, bin} <- bins, do: {:module, ^m} = :rpc.call(node, :code, :load_binary, [m, ~c"nofile", bin])
    node
  end
end

# Compiled in memory: the peers get the binaries.
bins =
  Code.compile_string("""
  defmodule CBCounter do
    def start(report, n), do: spawn(fn -> count(report, n) end)
    defp count(report, 0), do: send(report, :counted)
    defp count(report, n), do: receive(do: (_ -> count(report, n - 1)))
  end
  defmodule CBAdder do
    use GenServer
    def init(s), do: {:ok, s}
    def handle_call(n, _from, s), do: {:reply, n + 1, s}
  end
  defmodule CBWatch do
    def start(report), do: spawn(fn -> init(report) end)
    defp init(report) do
      {_ref, _} = :pg.monitor(:cb, :g)
      send(report, :watching)
      loop(report)
    end
    defp loop(report) do
      receive do
        {_ref, :join, :g, _} -> send(report, :seen)
        _ -> :ok
      end
      loop(report)
    end
  end
  """)

:net_kernel.set_net_ticktime(4)
IO.puts("# c1_c2_cluster otp=#{:erlang.system_info(:otp_release)} schedulers=#{:erlang.system_info(:schedulers_online)} loadavg=#{File.read!("/proc/loadavg") |> String.split() |> Enum.take(3) |> Enum.join(",")}")
b = ClusterBeam.peer(:cbb, bins)
c = ClusterBeam.peer(:cbc, bins)
me = self()

# C1: one-way sends.
n = 1_000_000
counter = :rpc.call(b, CBCounter, :start, [me, n])
t0 = ClusterBeam.now()
Enum.each(1..n, &send(counter, &1))
receive do
  :counted -> :ok
after
  300_000 -> raise "messages lost"
end
el = ClusterBeam.now() - t0
ClusterBeam.line("C1_send", msgs_per_s: n * 1.0e9 / el)

# C1: calls, by pid and by name.
{:ok, adder} = :rpc.call(b, GenServer, :start, [CBAdder, 0, [name: :adder]])
calls = 20_000
for {name, to} <- [{"C1_call", adder}, {"C1_call_named", {:adder, b}}] do
  Enum.each(1..1000, &GenServer.call(to, &1)) # warm up, as the gotp side does
  t0 = ClusterBeam.now()
  lat =
    for i <- 1..calls do
      s = ClusterBeam.now()
      r = GenServer.call(to, i)
      true = r == i + 1
      ClusterBeam.now() - s
    end
  el = ClusterBeam.now() - t0
  sorted = Enum.sort(lat)
  ClusterBeam.line(name,
    calls_per_s: calls * 1.0e9 / el,
    p50_us: ClusterBeam.pct(sorted, 50) / 1000,
    p99_us: ClusterBeam.pct(sorted, 99) / 1000
  )
end

# C2: a join on a, seen by c's monitor (and told to a: one hop more).
for node <- [node(), b, c], do: {:ok, _} = :rpc.call(node, :pg, :start, [:cb])
:rpc.call(c, CBWatch, :start, [me])
receive do
  :watching -> :ok
end
joins = 200
lat =
  for _ <- 1..joins do
    p = spawn(fn -> receive(do: (:stop -> :ok)) end)
    s = ClusterBeam.now()
    :ok = :pg.join(:cb, :g, p)
    receive do
      :seen -> ClusterBeam.now() - s
    after
      10_000 -> raise "join not seen"
    end
  end
sorted = Enum.sort(lat)
ClusterBeam.line("C2_join", p50_ms: ClusterBeam.pct(sorted, 50) / 1.0e6, max_ms: List.last(sorted) / 1.0e6)

# C2: c's OS process killed; a sees nodedown.
:ok = :net_kernel.monitor_nodes(true)
downs =
  for i <- 1..5 do
    victim = if i == 1, do: c, else: ClusterBeam.peer(:"cbc#{i}", bins)
    os_pid = :rpc.call(victim, :os, :getpid, [])
    s = ClusterBeam.now()
    System.cmd("kill", ["-9", to_string(os_pid)])
    receive do
      {:nodedown, ^victim} -> ClusterBeam.now() - s
    after
      60_000 -> raise "no nodedown"
    end
  end
sorted = Enum.sort(downs)
ClusterBeam.line("C2_killed", median_ms: ClusterBeam.pct(sorted, 50) / 1.0e6, max_ms: List.last(sorted) / 1.0e6)
