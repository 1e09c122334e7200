# W7 on the BEAM: ping-pong round trips between two processes, and eight
# senders to one receiver.
#   elixir w7_messaging.exs
# gotp's side: BenchmarkW7PingPong and BenchmarkW7FanIn in the root package.
Code.require_file("anchor.exs", __DIR__)

defmodule W7 do
  def echo do
    receive do
      {:ping, from} -> (send(from, :pong); echo())
      :stop -> :ok
    end
  end

  def ping(_to, 0), do: :ok

  def ping(to, n) do
    send(to, {:ping, self()})
    receive do: (:pong -> ping(to, n - 1))
  end

  def drain(me, 0), do: send(me, :drained)
  def drain(me, n), do: receive(do: ({:m, _} -> drain(me, n - 1)))

  def flood(_to, 0), do: :ok
  def flood(to, n), do: (send(to, {:m, n}); flood(to, n - 1))

  # Until the receiver has drained, sample its queue and the VM's memory every
  # 10 ms; return the peaks.
  def sample(receiver, queue, mem) do
    receive do
      :drained -> {queue, mem}
    after
      10 ->
        q =
          case Process.info(receiver, :message_queue_len) do
            {:message_queue_len, l} -> l
            nil -> 0
          end

        sample(receiver, max(queue, q), max(mem, :erlang.memory(:total)))
    end
  end
end

GotpBench.describe("w7_messaging")
trips = GotpBench.size(1_000_000)
senders = 8
per_sender = GotpBench.size(1_000_000)

# 1. Ping-pong: one process sends, the other answers, a million times.
echo = spawn(W7, :echo, [])
{ns, [pinger]} = GotpBench.together(1, fn _ -> W7.ping(echo, trips) end)
send(pinger, :stop)
send(echo, :stop)
GotpBench.line("W7_ping_pong", trips, ns, "-", round_trips: trips, msgs_per_sec: 2 * trips * 1.0e9 / ns)

# 2. Fan-in: eight senders, a million messages each, to one receiver; timed
# until the receiver has taken the last one.
GotpBench.pause()
total = senders * per_sender
me = self()
receiver = spawn(W7, :drain, [me, total])
flooders =
  for _ <- 1..senders do
    spawn(fn ->
      send(me, {:ready, self()})
      receive do: (:start -> W7.flood(receiver, per_sender))
    end)
  end
for p <- flooders, do: receive(do: ({:ready, ^p} -> :ok))
mem0 = :erlang.memory(:total)
t0 = GotpBench.clock()
for p <- flooders, do: send(p, :start)
{peak_queue, peak_mem} = W7.sample(receiver, 0, mem0)
GotpBench.line("W7_fan_in", total, GotpBench.clock() - t0, "#{peak_mem - mem0}B_peak_total_delta",
  senders: senders, msgs_per_sender: per_sender, peak_receiver_queue: peak_queue)
