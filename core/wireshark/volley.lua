-- Wireshark dissector for Volley's wire format (core/WIRE.md, version 1).
--
-- Install: copy to ~/.local/lib/wireshark/plugins/ (or pass
-- `-X lua_script:core/wireshark/volley.lua` to wireshark or tshark).
--
-- It reads:
--   * captures written with VOLLEY_PCAP=DIR (link type USER0, one frame a record),
--     on every fabric, compact frames included;
--   * the eth fabric's raw frames (ethertype 0x88B5, HELLOs 0x88B6);
--   * the udp fabric's datagrams (found by a heuristic on their first bytes).
--
-- Every header field has a filter name under `volley.` (volley.kind,
-- volley.flags.reliable, volley.seq, ...); a frame shorter than its header says
-- is marked malformed.

local volley = Proto("volley", "Volley cluster messaging")

local KINDS = {
    [1] = "DATA", [2] = "ACK", [3] = "BARRIER", [4] = "MULTICAST", [5] = "CONTROL",
    [6] = "FETCH_ADD", [7] = "FETCH_ADD_REPLY", [8] = "PUT", [9] = "GET_REQUEST",
    [10] = "GET_REPLY", [11] = "AINVOKE", [12] = "PACKET",
}
local CONTROLS = {
    [1] = "REJECT", [2] = "DENY_PUT", [3] = "DENY_GET", [4] = "FENCE",
    [5] = "FENCE_OK", [6] = "ABORT", [7] = "BYE",
}
local SHAPES = { [0] = "binary", [1] = "binomial", [2] = "chain", [3] = "flat", [4] = "board" }

local HEADER_LEN = 56
local COMPACT_LEN = 28
local HELLO_LEN = 60
local TAG_LEN = 16

local F = volley.fields
-- The full header (big-endian).
F.version = ProtoField.uint8("volley.version", "Version")
F.kind = ProtoField.uint8("volley.kind", "Kind", base.DEC, KINDS)
F.flags = ProtoField.uint16("volley.flags", "Flags", base.HEX)
F.f_reliable = ProtoField.bool("volley.flags.reliable", "RELIABLE", 16, nil, 0x0001)
F.f_ack_req = ProtoField.bool("volley.flags.ack_req", "ACK_REQ", 16, nil, 0x0002)
F.f_has_ack = ProtoField.bool("volley.flags.has_ack", "HAS_ACK", 16, nil, 0x0004)
F.f_last = ProtoField.bool("volley.flags.last", "LAST", 16, nil, 0x0008)
F.f_no_crc = ProtoField.bool("volley.flags.no_crc", "NO_CRC", 16, nil, 0x0010)
F.f_refused = ProtoField.bool("volley.flags.refused", "REFUSED", 16, nil, 0x0020)
F.f_retry = ProtoField.bool("volley.flags.retry", "RETRY", 16, nil, 0x0040)
F.f_auth = ProtoField.bool("volley.flags.auth", "AUTH", 16, nil, 0x0080)
F.f_tree = ProtoField.bool("volley.flags.tree", "TREE", 16, nil, 0x0100)
F.job_key = ProtoField.uint32("volley.job_key", "Job key", base.HEX)
F.src_group = ProtoField.uint16("volley.src_group", "Source group")
F.src_node = ProtoField.uint16("volley.src_node", "Source node")
F.dst_group = ProtoField.uint16("volley.dst_group", "Destination group")
F.dst_node = ProtoField.uint16("volley.dst_node", "Destination node")
F.src_port = ProtoField.uint16("volley.src_port", "Source port")
F.dst_port = ProtoField.uint16("volley.dst_port", "Destination port")
F.seq = ProtoField.uint32("volley.seq", "Sequence number")
F.ack = ProtoField.uint32("volley.ack", "Ack (next expected)")
F.sack = ProtoField.uint64("volley.sack", "Selective ack", base.HEX)
F.window = ProtoField.uint16("volley.window", "Window (credits)")
F.payload_len = ProtoField.uint16("volley.payload_len", "Payload length")
F.msg_id = ProtoField.uint32("volley.msg_id", "Message id")
F.offset = ProtoField.uint32("volley.offset", "Offset")
F.total_len = ProtoField.uint32("volley.total_len", "Total length")
F.crc = ProtoField.uint32("volley.crc", "CRC-32C", base.HEX)
-- What some kinds say in `offset` and `msg_id`.
F.control = ProtoField.uint32("volley.control", "Control", base.DEC, CONTROLS)
F.epoch = ProtoField.uint32("volley.barrier.epoch", "Barrier epoch")
F.round = ProtoField.uint32("volley.barrier.round", "Barrier round")
F.barrier_failed = ProtoField.bool("volley.barrier.failed", "Barrier failed")
F.shape = ProtoField.uint32("volley.packet.shape", "Tree shape", base.DEC, SHAPES)
-- Payload prefixes.
F.tree_root = ProtoField.uint16("volley.tree.root", "Broadcast root")
F.tree_shape = ProtoField.uint8("volley.tree.shape", "Broadcast tree", base.DEC, SHAPES)
F.tree_bseq = ProtoField.uint32("volley.tree.bseq", "Broadcast number")
F.put_addr = ProtoField.uint64("volley.put.address", "Put address", base.HEX)
F.put_bell = ProtoField.uint64("volley.put.bell", "Put bell", base.HEX)
F.get_addr = ProtoField.uint64("volley.get.address", "Get source address", base.HEX)
F.get_bell = ProtoField.uint64("volley.get.bell", "Get bell", base.HEX)
F.get_len = ProtoField.uint32("volley.get.length", "Get length")
F.get_req = ProtoField.uint32("volley.get_reply.request", "Get request id")
F.payload = ProtoField.bytes("volley.payload", "Payload")
F.tag = ProtoField.bytes("volley.tag", "Authentication tag")
-- The compact header (little-endian).
F.c_magic = ProtoField.uint8("volley.compact.magic", "Compact magic", base.HEX)
F.c_put = ProtoField.bool("volley.compact.put", "Compact put")
F.c_flags = ProtoField.uint8("volley.compact.flags", "Flags", base.HEX)
F.c_reliable = ProtoField.bool("volley.compact.flags.reliable", "RELIABLE", 8, nil, 0x01)
F.c_ack_req = ProtoField.bool("volley.compact.flags.ack_req", "ACK_REQ", 8, nil, 0x02)
F.c_refused = ProtoField.bool("volley.compact.flags.refused", "REFUSED", 8, nil, 0x20)
F.c_retry = ProtoField.bool("volley.compact.flags.retry", "RETRY", 8, nil, 0x40)
F.c_zero = ProtoField.uint16("volley.compact.zero", "Zero")
-- HELLO (start-up exchange).
F.h_magic = ProtoField.uint8("volley.hello.magic", "HELLO magic", base.HEX)
F.h_flags = ProtoField.uint8("volley.hello.flags", "Flags", base.HEX)
F.h_done = ProtoField.bool("volley.hello.flags.done", "DONE", 8, nil, 0x01)
F.h_seen = ProtoField.bool("volley.hello.flags.seen", "SEEN", 8, nil, 0x02)
F.h_from = ProtoField.uint16("volley.hello.from", "Sender (rank)")
F.h_to = ProtoField.uint16("volley.hello.to", "Receiver (rank)")
F.h_zero = ProtoField.uint16("volley.hello.zero", "Zero")
F.h_job = ProtoField.uint32("volley.hello.job_key", "Job key", base.HEX)
F.h_nonce = ProtoField.bytes("volley.hello.nonce", "Sender's nonce")
F.h_echo = ProtoField.bytes("volley.hello.echo", "Receiver's nonce, echoed")
F.h_mac = ProtoField.bytes("volley.hello.mac", "MAC (SipHash-2-4-128)")

local E_short = ProtoExpert.new("volley.short", "Frame shorter than its header says",
    expert.group.MALFORMED, expert.severity.ERROR)
local E_magic = ProtoExpert.new("volley.unknown", "Not a Volley frame (unknown first byte)",
    expert.group.MALFORMED, expert.severity.WARN)
volley.experts = { E_short, E_magic }

local function kind_name(k)
    return KINDS[k] or ("kind " .. k)
end

-- The full header and its payload.
local function dissect_full(buf, pinfo, tree)
    local len = buf:len()
    local t = tree:add(volley, buf(0, math.min(len, HEADER_LEN)), "Volley frame")
    if len < HEADER_LEN then
        t:add_proto_expert_info(E_short)
        return len
    end
    local kind = buf(1, 1):uint()
    local flags = buf(2, 2):uint()
    t:add(F.version, buf(0, 1))
    t:add(F.kind, buf(1, 1))
    local ft = t:add(F.flags, buf(2, 2))
    for _, f in ipairs({ F.f_reliable, F.f_ack_req, F.f_has_ack, F.f_last, F.f_no_crc,
        F.f_refused, F.f_retry, F.f_auth, F.f_tree }) do
        ft:add(f, buf(2, 2))
    end
    t:add(F.job_key, buf(4, 4))
    t:add(F.src_group, buf(8, 2))
    t:add(F.src_node, buf(10, 2))
    t:add(F.dst_group, buf(12, 2))
    t:add(F.dst_node, buf(14, 2))
    t:add(F.src_port, buf(16, 2))
    t:add(F.dst_port, buf(18, 2))
    t:add(F.seq, buf(20, 4))
    t:add(F.ack, buf(24, 4))
    t:add(F.sack, buf(28, 8))
    t:add(F.window, buf(36, 2))
    t:add(F.payload_len, buf(38, 2))
    t:add(F.msg_id, buf(40, 4))
    t:add(F.offset, buf(44, 4))
    t:add(F.total_len, buf(48, 4))
    t:add(F.crc, buf(52, 4))
    local off = buf(44, 4):uint()
    if kind == 3 then
        t:add(F.epoch, buf(40, 4))
        t:add(F.round, buf(44, 4), bit.band(off, 0x7fffffff))
        t:add(F.barrier_failed, buf(44, 4), bit.band(off, 0x80000000) ~= 0)
    elseif kind == 5 then
        t:add(F.control, buf(44, 4))
    elseif kind == 12 then
        t:add(F.shape, buf(44, 4))
    end
    local plen = buf(38, 2):uint()
    local auth = bit.band(flags, 0x0080) ~= 0
    local need = HEADER_LEN + plen + (auth and TAG_LEN or 0)
    if len < need then
        t:add_proto_expert_info(E_short)
        plen = math.max(0, math.min(plen, len - HEADER_LEN))
    end
    local p = HEADER_LEN
    if plen > 0 then
        local pt = t:add(F.payload, buf(p, plen))
        if kind == 4 and bit.band(flags, 0x0100) ~= 0 and plen >= 8 then
            pt:add(F.tree_root, buf(p, 2))
            pt:add(F.tree_shape, buf(p + 2, 1))
            pt:add(F.tree_bseq, buf(p + 4, 4))
        elseif kind == 8 and plen >= 16 then
            pt:add(F.put_addr, buf(p, 8))
            pt:add(F.put_bell, buf(p + 8, 8))
        elseif kind == 9 and plen >= 24 then
            pt:add(F.get_addr, buf(p, 8))
            pt:add(F.get_bell, buf(p + 8, 8))
            pt:add(F.get_len, buf(p + 16, 4))
        elseif kind == 10 and plen >= 16 then
            pt:add(F.get_req, buf(p, 4))
        end
    end
    if auth and len >= need then
        t:add(F.tag, buf(HEADER_LEN + plen, TAG_LEN))
    end
    local info = string.format("%s %d.%d:%d -> %d.%d:%d", kind_name(kind),
        buf(8, 2):uint(), buf(10, 2):uint(), buf(16, 2):uint(),
        buf(12, 2):uint(), buf(14, 2):uint(), buf(18, 2):uint())
    if bit.band(flags, 0x0001) ~= 0 then
        info = info .. " seq=" .. buf(20, 4):uint()
    end
    if bit.band(flags, 0x0004) ~= 0 then
        info = info .. " ack=" .. buf(24, 4):uint()
    end
    info = info .. " msg=" .. buf(40, 4):uint() .. " len=" .. plen
    pinfo.cols.info:set(info)
    return len
end

-- A compact frame (0xC5 message, 0xC6 put): little-endian.
local function dissect_compact(buf, pinfo, tree)
    local len = buf:len()
    local t = tree:add(volley, buf(0, math.min(len, COMPACT_LEN)), "Volley compact frame")
    if len < COMPACT_LEN then
        t:add_proto_expert_info(E_short)
        return len
    end
    local put = buf(0, 1):uint() == 0xC6
    t:add(F.c_magic, buf(0, 1))
    t:add(F.c_put, buf(0, 1), put)
    local ft = t:add(F.c_flags, buf(1, 1))
    for _, f in ipairs({ F.c_reliable, F.c_ack_req, F.c_refused, F.c_retry }) do
        ft:add(f, buf(1, 1))
    end
    t:add_le(F.src_group, buf(2, 2))
    t:add_le(F.src_node, buf(4, 2))
    t:add_le(F.src_port, buf(6, 2))
    t:add_le(F.dst_port, buf(8, 2))
    t:add_le(F.payload_len, buf(10, 2))
    t:add_le(F.seq, buf(12, 4))
    t:add_le(F.msg_id, buf(16, 4))
    t:add_le(F.ack, buf(20, 4))
    t:add_le(F.window, buf(24, 2))
    t:add_le(F.c_zero, buf(26, 2))
    local plen = buf(10, 2):le_uint()
    if len < COMPACT_LEN + plen then
        t:add_proto_expert_info(E_short)
        plen = len - COMPACT_LEN
    end
    if plen > 0 then
        local pt = t:add(F.payload, buf(COMPACT_LEN, plen))
        if put and plen >= 16 then
            pt:add(F.put_addr, buf(COMPACT_LEN, 8))
            pt:add(F.put_bell, buf(COMPACT_LEN + 8, 8))
        end
    end
    pinfo.cols.info:set(string.format("%s (compact) %d.%d:%d -> :%d seq=%d ack=%d msg=%d len=%d",
        put and "PUT" or "DATA", buf(2, 2):le_uint(), buf(4, 2):le_uint(), buf(6, 2):le_uint(),
        buf(8, 2):le_uint(), buf(12, 4):le_uint(), buf(20, 4):le_uint(),
        buf(16, 4):le_uint(), plen))
    return len
end

local function dissect_hello(buf, pinfo, tree)
    local len = buf:len()
    local t = tree:add(volley, buf(0, math.min(len, HELLO_LEN)), "Volley HELLO")
    if len < HELLO_LEN then
        t:add_proto_expert_info(E_short)
        return len
    end
    t:add(F.h_magic, buf(0, 1))
    local ft = t:add(F.h_flags, buf(1, 1))
    ft:add(F.h_done, buf(1, 1))
    ft:add(F.h_seen, buf(1, 1))
    t:add(F.h_from, buf(2, 2))
    t:add(F.h_to, buf(4, 2))
    t:add(F.h_zero, buf(6, 2))
    t:add(F.h_job, buf(8, 4))
    t:add(F.h_nonce, buf(12, 16))
    t:add(F.h_echo, buf(28, 16))
    t:add(F.h_mac, buf(44, 16))
    pinfo.cols.info:set(string.format("HELLO %d -> %d", buf(2, 2):uint(), buf(4, 2):uint()))
    return len
end

function volley.dissector(buf, pinfo, tree)
    if buf:len() < 1 then
        return 0
    end
    pinfo.cols.protocol:set("Volley")
    local first = buf(0, 1):uint()
    if first == 1 then
        return dissect_full(buf, pinfo, tree)
    elseif first == 0xC5 or first == 0xC6 then
        return dissect_compact(buf, pinfo, tree)
    elseif first == 0xC7 then
        return dissect_hello(buf, pinfo, tree)
    end
    local t = tree:add(volley, buf(), "Volley (unknown)")
    t:add_proto_expert_info(E_magic)
    return buf:len()
end

-- udp fabric: a datagram that starts as a Volley frame or HELLO does.
local function heuristic(buf, pinfo, tree)
    local len = buf:len()
    if len < 1 then
        return false
    end
    local first = buf(0, 1):uint()
    if first == 1 and len >= HEADER_LEN then
        local kind = buf(1, 1):uint()
        if KINDS[kind] == nil then
            return false
        end
    elseif not (first == 0xC7 and len == HELLO_LEN) then
        return false
    end
    volley.dissector(buf, pinfo, tree)
    return true
end

local encaps = wtap_encaps or wtap
DissectorTable.get("wtap_encap"):add(encaps.USER0, volley)
DissectorTable.get("ethertype"):add(0x88B5, volley)
DissectorTable.get("ethertype"):add(0x88B6, volley)
volley:register_heuristic("udp", heuristic)
