# Helpers shared by gotp's BEAM anchor scripts (docs/bench/beam/*.exs).
#
# Each script measures, on Erlang/OTP and Elixir, the same work as one of
# gotp's W benchmarks, and prints one line per figure:
#
#   NAME ops_per_sec=RATE ns_per_op=NS mem=SIZE|- [key=value ...]
#
# which docs/bench/quiet-sitting.py reads. Lines that start with "#" say what
# ran where. GOTP_BENCH_SCALE (default 1) multiplies every size, so that
# GOTP_BENCH_SCALE=0.001 checks a script in a second or two; figures are only
# comparable at scale 1.
defmodule GotpBench do
  def clock, do: System.monotonic_time(:nanosecond)

  @doc "Scales a workload size by GOTP_BENCH_SCALE, never below 1."
  def size(n) do
    scale =
      case System.get_env("GOTP_BENCH_SCALE") do
        nil -> 1.0
        s -> String.to_float(if String.contains?(s, "."), do: s, else: s <> ".0")
      end

    max(1, round(n * scale))
  end

  def describe(script) do
    info = fn key -> :erlang.system_info(key) end

    IO.puts(
      "# script=#{script} otp=#{info.(:otp_release)} erts=#{info.(:version)} elixir=#{System.version()}" <>
        " schedulers_online=#{info.(:schedulers_online)} process_limit=#{info.(:process_limit)}"
    )

    case File.read("/proc/loadavg") do
      {:ok, s} -> IO.puts("# loadavg=" <> (s |> String.split() |> Enum.take(3) |> Enum.join(",")))
      _ -> :ok
    end
  end

  @doc "Prints one figure: count operations in elapsed nanoseconds."
  def line(name, count, elapsed, mem \\ "-", notes \\ []) do
    notes = Enum.map_join(notes, fn {k, v} -> " #{k}=#{num(v)}" end)
    IO.puts("#{name} ops_per_sec=#{num(count * 1.0e9 / elapsed)} ns_per_op=#{num(elapsed / count)} mem=#{mem}#{notes}")
  end

  def num(x) when is_float(x), do: :erlang.float_to_binary(x, decimals: 1)
  def num(x), do: to_string(x)

  def bytes_each(bytes, n, what), do: "#{num(bytes / n)}B/#{what}"

  @doc """
  Starts n processes that each run work.(i) once all are started, and
  returns {nanoseconds from the start signal until the last one finished,
  pids}. The processes then wait for :stop, so what they registered stays.
  """
  def together(n, work) do
    me = self()

    pids =
      for i <- 0..(n - 1) do
        spawn(fn ->
          send(me, {:ready, self()})
          receive do: (:start -> :ok)
          work.(i)
          send(me, {:finished, self()})
          receive do: (:stop -> :ok)
        end)
      end

    for p <- pids, do: receive(do: ({:ready, ^p} -> :ok))
    t0 = clock()
    for p <- pids, do: send(p, :start)
    for p <- pids, do: receive(do: ({:finished, ^p} -> :ok))
    {clock() - t0, pids}
  end

  @doc "Waits, in 1 ms steps, until check.() is true."
  def await(check) do
    unless check.() do
      Process.sleep(1)
      await(check)
    end
  end

  @doc "Lets the previous phase's garbage go before the next one."
  def pause do
    :erlang.garbage_collect()
    Process.sleep(50)
  end

  def times(0, _f), do: :ok
  def times(n, f), do: (f.(); times(n - 1, f))
end
