#!/usr/bin/python3
"""A stranger's connection flood against a rank's port, for the flood test and benchmark:

    /usr/bin/python3 tools/bench/conn_flood.py HOST:PORT [--hold N] [--rate R] --seconds S

--hold N keeps N TCP connections open at all times (one the rank closes is opened again at
once); --rate R opens R new connections a second on top, each held until the rank closes
it. The connections send nothing: they are what anyone the firewall lets through can open
without the job key. Raises its own open-file limit to the hard one. Prints one line at the
end: "opened N, closed by the target N, failed N, most open N".
"""
import argparse, resource, select, signal, socket, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("target")
ap.add_argument("--hold", type=int, default=0)
ap.add_argument("--rate", type=float, default=0)
ap.add_argument("--seconds", type=float, required=True)
a = ap.parse_args()
host, _, port = a.target.rpartition(":")
if not host or not port.isdigit() or a.hold < 0 or a.rate < 0 or a.seconds <= 0:
    sys.exit("conn_flood: give HOST:PORT, --hold >= 0, --rate >= 0 and --seconds > 0")
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

held, rated = set(), set()          # sockets of --hold, sockets of --rate
opened = closed = failed = most = 0
poller = select.epoll()


def connect(pool):
    global opened, failed
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    try:
        s.connect_ex((host.strip("[]"), int(port)))
    except OSError:
        failed += 1
        s.close()
        return
    poller.register(s.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
    pool.add(s)
    by_fd[s.fileno()] = s
    opened += 1


by_fd = {}  # every open socket, by descriptor
stopping = False


def stop(*_):
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, stop)  # a SIGTERM ends the flood early, with its summary
start = time.monotonic()
next_rated = start
while time.monotonic() - start < a.seconds and not stopping:
    while len(held) < a.hold:
        before = len(held)
        connect(held)
        if len(held) == before:
            break  # refused or out of descriptors: try again on the next round
    now = time.monotonic()
    while a.rate > 0 and next_rated <= now:
        connect(rated)
        next_rated += 1.0 / a.rate
    most = max(most, len(by_fd))
    for fd, ev in poller.poll(0.005):
        s = by_fd.get(fd)
        if s is None:
            continue
        try:
            data = s.recv(4096)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            data = b""
        if data:
            continue  # the rank's greeting: keep holding
        poller.unregister(fd)
        del by_fd[fd]
        s.close()
        (held if s in held else rated).discard(s)
        closed += 1
        if ev & select.EPOLLERR:
            failed += 1
print(f"opened {opened}, closed by the target {closed}, failed {failed}, most open {most}", flush=True)
