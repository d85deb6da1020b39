"""An Envoy-style client of tollgate-rls written with grpcio, another implementation of gRPC
and HTTP/2 than the server's: it calls ShouldRateLimit with protobuf messages encoded here by
hand (no generated stubs) and checks the answers of the reference's integration scenario.

Usage: python3 envoy_client.py HOST:PORT   (exits 0 when every check passes)
"""

import random
import sys

import grpc

METHOD = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
OK, OVER_LIMIT = 1, 2
SECOND, MINUTE, HOUR = 1, 2, 3


# --- protobuf wire format: just what these messages need -------------------------------


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number, wire_type, payload):
    return varint(number << 3 | wire_type) + payload


def text(number, value):
    data = value.encode()
    return field(number, 2, varint(len(data)) + data)


def message(number, data):
    return field(number, 2, varint(len(data)) + data)


def request(domain, descriptors, hits=0):
    """RateLimitRequest{domain=1, descriptors=2 (entries=1: key=1, value=2), hits_addend=3}."""
    out = text(1, domain)
    for entries in descriptors:
        descriptor = b"".join(message(1, text(1, k) + text(2, v)) for k, v in entries)
        out += message(2, descriptor)
    if hits:
        out += field(3, 0, varint(hits))
    return out


def read_varint(data, at):
    n = shift = 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def fields(data):
    """(number, value) pairs: ints for varints, bytes for length-delimited fields."""
    at, out = 0, []
    while at < len(data):
        key, at = read_varint(data, at)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, at = read_varint(data, at)
        elif wire_type == 2:
            length, at = read_varint(data, at)
            value, at = data[at : at + length], at + length
        else:
            raise ValueError("unexpected wire type %d" % wire_type)
        out.append((number, value))
    return out


def response(data):
    """RateLimitResponse as (overall_code, [status dicts], {header: value})."""
    overall, statuses, headers = 0, [], {}
    for number, value in fields(data):
        if number == 1:
            overall = value
        elif number == 2:
            status = {"code": 0, "limit": None, "remaining": 0, "reset": None}
            for n, v in fields(value):
                if n == 1:
                    status["code"] = v
                elif n == 2:
                    limit = {"requests_per_unit": 0, "unit": 0, "name": ""}
                    for ln, lv in fields(v):
                        key = {1: "requests_per_unit", 2: "unit", 3: "name"}[ln]
                        limit[key] = lv.decode() if ln == 3 else lv
                    status["limit"] = limit
                elif n == 3:
                    status["remaining"] = v
                elif n == 4:
                    status["reset"] = dict(fields(v)).get(1, 0)
            statuses.append(status)
        elif number == 3:
            header = dict(fields(value))
            headers[header[1].decode()] = header[2].decode()
    return overall, statuses, headers


# --- the scenario ------------------------------------------------------------------------


def check(condition, what):
    if not condition:
        print("FAILED: " + what, file=sys.stderr)
        sys.exit(1)


def main():
    channel = grpc.insecure_channel(sys.argv[1])
    call = channel.unary_unary(METHOD, request_serializer=None, response_deserializer=None)

    def ask(domain, descriptors, hits=0):
        return response(call(request(domain, descriptors, hits), timeout=5))

    overall, statuses, _ = ask("foo", [[("hello", "world")]])
    check(overall == OK and statuses == [{"code": OK, "limit": None, "remaining": 0, "reset": None}],
          "an unknown domain is OK with no limit: %r" % statuses)

    overall, statuses, _ = ask("basic", [[("key1", "py-%d" % random.getrandbits(48))]])
    limit = statuses[0]["limit"]
    check(overall == OK and limit["requests_per_unit"] == 50 and limit["unit"] == SECOND,
          "basic key1 is 50 per second: %r" % statuses)
    check(statuses[0]["remaining"] == 49 and statuses[0]["reset"] == 1, "49 left, 1s: %r" % statuses)

    value = "py-%d" % random.getrandbits(48)
    for i in range(25):
        overall, statuses, _ = ask("another", [[("key2", value)]])
        want = (OVER_LIMIT, 0) if i >= 20 else (OK, 20 - (i + 1))
        check((overall, statuses[0]["remaining"]) == want, "key2 request %d: %r" % (i, statuses))
        check(1 <= statuses[0]["reset"] <= 60, "a minute window: %r" % statuses)

    value = "py-%d" % random.getrandbits(48)
    for i in range(15):
        overall, statuses, headers = ask("another", [[("key2", value)], [("key3", value)]])
        if i >= 10:
            # key2 is charged all the same, as the reference's integration_test.go expects.
            want = (OVER_LIMIT, [(OK, 20 - (i + 1)), (OVER_LIMIT, 0)])
        else:
            want = (OK, [(OK, 20 - (i + 1)), (OK, 10 - (i + 1))])
        got = (overall, [(s["code"], s["remaining"]) for s in statuses])
        check(got == want, "key2 and key3, request %d: %r" % (i, got))
        check(headers.get("RateLimit-Limit") == "10", "headers of key3: %r" % headers)
        check(headers.get("RateLimit-Remaining") == str(want[1][1][1]), "remaining header: %r" % headers)

    # hits_addend counts several at once.
    value = "py-%d" % random.getrandbits(48)
    overall, statuses, _ = ask("another", [[("key2", value)]], hits=7)
    check((overall, statuses[0]["remaining"]) == (OK, 13), "7 hits: %r" % statuses)

    # An empty domain is an error, as in the reference.
    try:
        call(request("", [[("a", "b")]]), timeout=5)
        check(False, "an empty domain must fail")
    except grpc.RpcError as e:
        check("domain must not be empty" in (e.details() or ""), "its message: %r" % e.details())

    print("python grpcio client: all checks passed")


if __name__ == "__main__":
    main()
