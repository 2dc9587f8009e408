#!/usr/bin/python3
"""nginx-ds.py - nginx in front of N ds-serve instances (ds-serve(1) SCALING).

Reads the plan `ds-tune plan -m DIR --instances N --json` prints and writes
either the nginx configuration of a load balancer over its instances or the
instances' command lines:

  nginx-ds.py PLAN.json --listen 127.0.0.1:8000 > /etc/nginx/conf.d/ds.conf
  nginx-ds.py PLAN.json --listen 127.0.0.1:8000 --standalone DIR > DIR/nginx.conf
      (a whole nginx.conf for `nginx -e stderr -p DIR -c nginx.conf`, any user)
  nginx-ds.py PLAN.json --commands      (one ds-serve command line per line)

--ports P0,P1,... replaces the plan's ports (8080, 8081, ...) in both.  The
balancer sends each request to the instance with the fewest open requests
(least_conn), streams server-sent events through unbuffered, keeps
connections to the instances open (closing them before ds-serve's --timeout
does), and passes a request an instance refused with 503 (its queue full,
or it is shutting down) to the next one.  Everything listens on loopback
unless --listen says otherwise.
"""
import argparse
import json
import re
import shlex
import sys


def instances(plan, ports):
    inst = plan.get("instances")
    if not isinstance(inst, list) or not inst:
        sys.exit("nginx-ds.py: the plan has no instances (ds-tune plan --json)")
    out = []
    for k, i in enumerate(inst):
        cmd = shlex.split(i["serve"])
        if cmd[0] != "ds-serve" or "--port" not in cmd:
            sys.exit("nginx-ds.py: instance %d: not a ds-serve command line" % k)
        at = cmd.index("--port") + 1
        if ports is not None:
            if k >= len(ports):
                sys.exit("nginx-ds.py: --ports: %d ports for %d instances"
                         % (len(ports), len(inst)))
            cmd[at] = str(ports[k])
        host = cmd[cmd.index("--host") + 1] if "--host" in cmd else "127.0.0.1"
        out.append((cmd, host, int(cmd[at])))
    return out


def http_block(inst, listen, max_body, timeout):
    servers = "".join("        server %s:%d max_fails=3 fail_timeout=5s;\n"
                      % (("[%s]" % h) if ":" in h else h, p) for _, h, p in inst)
    return f"""    # ds-serve instances from ds-tune plan (nginx-ds.py)
    upstream ds_serve {{
        least_conn;
{servers}        keepalive 64;
        keepalive_timeout {max(1, timeout // 2)}s;   # below ds-serve --timeout {timeout}
    }}

    server {{
        listen {listen};
        client_max_body_size {max_body};          # ds-serve --max-body
        client_body_buffer_size {max_body};       # bodies stay in memory

        location / {{
            proxy_pass http://ds_serve;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Host $host;
            proxy_buffering off;                  # stream events as they come
            proxy_read_timeout 3600s;             # an answer comes when it is whole
            proxy_send_timeout {timeout}s;
            # a full queue (503) is tried on the next instance; nothing
            # was generated for it
            proxy_next_upstream error http_503 non_idempotent;
        }}
    }}
"""


def standalone(body, prefix):
    return f"""# nginx-ds.py: a whole configuration; run as
#   nginx -e stderr -p {prefix} -c nginx.conf
daemon off;
worker_processes 1;
pid {prefix}/nginx.pid;
error_log stderr warn;

events {{
    worker_connections 1024;
}}

http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;

{body}}}
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("plan", help="ds-tune plan --json output ('-': stdin)")
    ap.add_argument("--listen", default="127.0.0.1:8000",
                    help="where nginx listens (default 127.0.0.1:8000)")
    ap.add_argument("--ports", help="P0,P1,...: the instances' ports")
    ap.add_argument("--max-body", default="1m",
                    help="nginx client_max_body_size (default 1m)")
    ap.add_argument("--timeout", type=int, default=60,
                    help="the instances' --timeout (default 60)")
    ap.add_argument("--standalone", metavar="DIR",
                    help="a whole nginx.conf with its files under DIR")
    ap.add_argument("--commands", action="store_true",
                    help="print the instances' command lines instead")
    a = ap.parse_args()
    if not re.fullmatch(r"[0-9]+[kKmMgG]?", a.max_body):
        sys.exit("nginx-ds.py: --max-body %s: a size as nginx writes it" % a.max_body)
    ports = None
    if a.ports:
        try:
            ports = [int(p) for p in a.ports.split(",")]
        except ValueError:
            sys.exit("nginx-ds.py: --ports %s: not a list of ports" % a.ports)
    with (sys.stdin if a.plan == "-" else open(a.plan)) as f:
        plan = json.load(f)
    inst = instances(plan, ports)
    if a.commands:
        for cmd, _, _ in inst:
            print(shlex.join(cmd))
        return
    body = http_block(inst, a.listen, a.max_body, a.timeout)
    if a.standalone:
        sys.stdout.write(standalone(body, a.standalone.rstrip("/")))
    else:
        sys.stdout.write(body.replace("\n    ", "\n").lstrip(" "))


if __name__ == "__main__":
    main()
