#!/usr/bin/env python3
"""A third-party Avro implementation (fastavro) reading what streamfold wrote,
and writing what streamfold must read. Called by tests/avro.rs.

stdin:  {"schema": <Avro schema JSON>,
         "read": ["<hex of an Avro body>", ...],   # bodies streamfold wrote
         "write": [<JSON value>, ...]}              # values for fastavro to write
stdout: {"read": [<decoded value>, ...], "write": ["<hex of an Avro body>", ...]}

Bodies are bare Avro binary: the 5-byte Confluent header is stripped (or
added) by the caller, as a Confluent deserializer does before handing the
body to an Avro decoder.
"""
import datetime
import decimal
import io
import json
import sys

import fastavro


EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def to_json(value):
    """What fastavro returns, as streamfold shows it in JSON: bytes/fixed as
    one character per byte (Avro's JSON encoding), decimals as text,
    timestamps as epoch milliseconds."""
    if isinstance(value, (bytes, bytearray)):
        return value.decode("latin-1")
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime):
        return (value - EPOCH) // datetime.timedelta(milliseconds=1)
    if isinstance(value, dict):
        return {k: to_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_json(v) for v in value]
    return value


def main():
    request = json.load(sys.stdin)
    schema = fastavro.parse_schema(request["schema"])
    read = []
    for body in request.get("read", []):
        buffer = io.BytesIO(bytes.fromhex(body))
        value = fastavro.schemaless_reader(buffer, schema, None)
        if buffer.tell() != len(buffer.getvalue()):
            raise SystemExit(f"fastavro left {len(buffer.getvalue()) - buffer.tell()} bytes unread")
        read.append(to_json(value))
    write = []
    for value in request.get("write", []):
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, schema, value)
        write.append(buffer.getvalue().hex())
    json.dump({"read": read, "write": write, "fastavro": fastavro.__version__}, sys.stdout)


if __name__ == "__main__":
    main()
