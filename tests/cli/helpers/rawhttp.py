#!/usr/bin/python3
"""rawhttp.py - hostile HTTP clients for serve-faults.bats, on raw sockets.

Usage: rawhttp.py PORT CASE [ARGS...]

  raw      each request of a fixed list of malformed or oversized ones, on
           its own connection: one line per request, "NAME STATUS" where
           STATUS is the status code answered, "closed" (the server closed
           without answering) or "hung" (nothing within 10 s)
  slow T   header lines sent a byte every 0.3 s by 20 clients at once,
           while another client asks /health every 0.5 s: "slow N CLOSED
           FASTEST SLOWEST" (how many of the 20 were closed, and when, in
           seconds) then "served OK/N" (the other client's answers)
  idle N   N connections that send nothing (or half a request line), held
           open while a completion is asked on one more: "opened N",
           "served STATUS SECONDS", then after closing them "health STATUS"
  bodies   request bodies with fields of every wrong kind: "PARAM STATUS
           GOT-PARAM" per case (the param the error object names)
"""
import http.client
import json
import socket
import sys
import threading
import time

HOST = "127.0.0.1"
PORT = int(sys.argv[1])


def status_of(data):
    """The status of an HTTP answer's first line, or None."""
    if not data.startswith(b"HTTP/1."):
        return None
    parts = data.split(b" ", 2)
    return parts[1].decode() if len(parts) > 1 else None


def exchange(payload, wait=10):
    """Send payload (bytes) on a fresh connection; the answer's status,
    "closed" or "hung"."""
    s = socket.create_connection((HOST, PORT))
    s.settimeout(wait)
    got = b""
    try:
        try:
            s.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass            # refused mid-way: what came back decides
        while b"\r\n" not in got:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except socket.timeout:
        return "hung"
    except ConnectionResetError:
        pass
    finally:
        s.close()
    return status_of(got) or "closed"


def raw():
    big = b"x" * 100000
    cases = [
        ("garbage", b"\x00\x01\x02\xff\xfe garbage\r\n\r\n"),
        ("no-version", b"GET /health\r\n\r\n"),
        ("no-path", b"GET\r\n\r\n"),
        ("bad-version", b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n"),
        ("lf-only", b"GET /health HTTP/1.1\nHost: x\n\n"),
        ("nul-in-path", b"GET /hea\x00lth HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("space-in-method", b"G T /health HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("no-host", b"GET /health HTTP/1.1\r\n\r\n"),
        ("header-no-colon", b"GET /health HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n"),
        ("long-path", b"GET /" + big + b" HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("long-header", b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + big +
         b"\r\n\r\n"),
        ("many-headers", b"GET /health HTTP/1.1\r\nHost: x\r\n" +
         b"".join(b"X-H%d: v\r\n" % i for i in range(5000)) + b"\r\n"),
        ("bad-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: abc\r\n\r\n{}"),
        ("negative-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: -1\r\n\r\n{}"),
        ("huge-length", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 99999999999999999999999\r\n\r\n{}"),
        ("two-lengths", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 2\r\nContent-Length: 5\r\n\r\n{}"),
        ("length-and-chunked", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}"),
        ("bad-chunk", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"),
        ("huge-chunk", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
         b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\n{}\r\n"),
    ]
    for name, payload in cases:
        print(name, exchange(payload), flush=True)


def slow(timeout):
    res = []
    lock = threading.Lock()
    head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200

    def one():
        s = socket.create_connection((HOST, PORT))
        t0 = time.time()
        closed = False
        try:
            for i in range(len(head)):
                s.sendall(head[i:i + 1])
                time.sleep(0.3)
                if time.time() - t0 > timeout + 20:
                    break
        except (BrokenPipeError, ConnectionResetError):
            closed = True
        if not closed:      # a write after the close may still succeed once
            s.settimeout(1)
            try:
                closed = s.recv(1) == b""
            except (socket.timeout, ConnectionResetError):
                closed = not isinstance(sys.exc_info()[1], socket.timeout)
        with lock:
            res.append((closed, time.time() - t0))
        s.close()

    th = [threading.Thread(target=one) for _ in range(20)]
    for t in th:
        t.start()
    ok = n = 0
    while any(t.is_alive() for t in th) and n < 60:
        c = http.client.HTTPConnection(HOST, PORT, timeout=5)
        try:
            c.request("GET", "/health")
            ok += c.getresponse().status == 200
        except OSError:
            pass
        c.close()
        n += 1
        time.sleep(0.5)
    for t in th:
        t.join()
    times = [dt for closed, dt in res if closed]
    print("slow %d closed %.1f %.1f" % (len(times), min(times or [0]),
                                        max(times or [0])))
    print("served %s" % ("OK" if ok == n and n > 0 else "%d/%d" % (ok, n)))


def idle(n):
    socks = []
    for i in range(n):
        s = socket.create_connection((HOST, PORT))
        if i % 2:
            s.sendall(b"GET /heal")
        socks.append(s)
    print("opened", len(socks), flush=True)
    time.sleep(0.5)
    t0 = time.time()
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    try:
        c.request("POST", "/v1/completions",
                  json.dumps({"prompt": "a", "max_tokens": 2}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        d = json.loads(r.read())
        st = r.status if d["usage"]["completion_tokens"] == 2 else "short"
    except OSError as e:
        st = "error:%s" % e.__class__.__name__
    print("served", st, "%.1f" % (time.time() - t0), flush=True)
    # the idle ones are still open (not dropped to make room)
    alive = 0
    for s in socks:
        s.setblocking(False)
        try:
            alive += s.recv(1) != b""
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    print("alive", alive)
    for s in socks:
        s.close()
    time.sleep(0.5)
    c = http.client.HTTPConnection(HOST, PORT, timeout=10)
    c.request("GET", "/health")
    print("health", c.getresponse().status)


def bodies():
    p = '{"prompt": "p", %s}'
    cases = [
        ("max_tokens", p % '"max_tokens": 1099511627777'),
        ("max_tokens", p % '"max_tokens": 1e30'),
        ("max_tokens", p % '"max_tokens": -1'),
        ("max_tokens", p % '"max_tokens": true'),
        ("max_tokens", p % '"max_tokens": [5]'),
        ("temperature", p % '"temperature": -0.5'),
        ("temperature", p % '"temperature": 1e309'),
        ("top_k", p % '"top_k": -1'),
        ("top_k", p % '"top_k": 2147483648'),
        ("repeat_penalty", p % '"repeat_penalty": 0'),
        ("seed", p % '"seed": 1.5'),
        ("stop", p % ('"stop": [%s]' % ",".join(['"s"'] * 17))),
        ("stop", p % ('"stop": "%s"' % ("s" * 600))),
        ("stream_options", p % '"stream_options": 1'),
        ("ignore_eos", p % '"ignore_eos": "yes"'),
        ("model", p % '"model": 5'),
        ("prompt[0]", '{"prompt": [-1]}'),
        ("prompt[0]", '{"prompt": [4294967296]}'),
        ("prompt[1]", '{"prompt": [1, "a"]}'),
        ("prompt", '{"prompt": ["a", "b"]}'),
        ("prompt", '{"prompt": {}}'),
        ("prompt", '{"prompt": []}'),
        ("prompt", '{}'),
        ("messages[0].content", '{"messages": [{"role": "user", "content": 5}]}'),
        ("messages[0].role", '{"messages": [{"content": "x"}]}'),
        ("messages[0]", '{"messages": [5]}'),
        ("messages[0].content[0]", '{"messages": [{"role": "user", "content": '
         '[{"type": "image_url", "image_url": "x"}]}]}'),
        ("messages", '{"messages": []}'),
        (None, '[' * 100000 + ']' * 100000),
        (None, '{"prompt": "\\udc00"}'),
        (None, '{"prompt": "a\x01b"}'),
        ("max_tokens", '{"prompt": "p", "max_tokens": 99999999999999999999}'),
        ("prompt", '{"prompt": [1, 2, -99999999999999999999]}'),
    ]
    c = http.client.HTTPConnection(HOST, PORT, timeout=30)
    for param, body in cases:
        path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
        c.request("POST", path, body.encode(), {"Content-Type": "application/json"})
        r = c.getresponse()
        try:
            got = json.loads(r.read())["error"]["param"]
        except (ValueError, KeyError, TypeError):
            got = "not-an-error-object"
        print(param, r.status, got)  # None: the body as a whole


CASES = {"raw": raw, "slow": lambda: slow(float(sys.argv[3])),
         "idle": lambda: idle(int(sys.argv[3])), "bodies": bodies}
CASES[sys.argv[2]]()
