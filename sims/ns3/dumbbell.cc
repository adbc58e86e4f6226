// ccjax ns-3 reference: a TCP dumbbell with one drop-tail bottleneck queue.
//
// Topology (one sender S_i and one receiver R_i per flow):
//
//   S_i --access_i-- A ==bottleneck== B --recv_i-- R_i
//
// * access_i: accessMbps (default max(1000, 10 * bwMbps)), one-way delay rtt_i/2 - btlDelay;
// * bottleneck A->B: bwMbps of IP bytes (the device rate is bwMbps * 1502/1500 so that the 2-byte
//   PPP header costs nothing: a 1500-byte IP packet takes exactly 1500*8/bw seconds), one-way
//   delay btlDelayMs (default min(rtt)/4), a DropTail device queue of bufferPkts packets;
// * recv_i: accessMbps, zero delay.
// Base RTT of flow i = rtt_i of pure propagation; serialization (1500*8/bw at the bottleneck plus
// microseconds on the fast links and for the ACK) and the senders' jitter come on top of it.
//
// Each sender's packets get an extra, order-preserving random delay uniform in [0, jitterUs)
// on the access link (default: one bottleneck packet time), to break drop-tail phase effects
// (see JitterChannel). --jitterUs=0 turns it off.
//
// The traffic-control layer is uninstalled from every device, so the only queues are the
// devices' DropTail queues; all but the bottleneck's hold 100000 packets and never fill (the
// "other_drops" output checks it). Without a queue disc, ns-3 stops the device queue when it is
// full and the traffic-control layer drops the packet ("TcDrop" trace of TrafficControlLayer);
// that is a drop-tail drop at the bottleneck and is counted as one.
//
// Random loss hits TCP data segments only (never SYN, pure ACK or FIN), with probability --loss,
// either before the bottleneck queue (--lossAt ingress, default: on A's receiving side of each
// access link, so a lost packet never occupies the queue nor the link; this is where ccjax applies
// it) or after it (--lossAt egress: on B's receiving side of the bottleneck; the packet used the
// link). ACKs are never lost.
//
// Output: one JSON object on stdout (see the "Output" section of README.md next to this file).
// Bytes are IP bytes (1500 per full segment: 20 IP + 32 TCP with timestamps + 1448 payload).

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <deque>
#include <iomanip>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

using namespace ns3;

namespace
{

// --------------------------------------------------------------------------------------------
// parsing helpers

std::vector<std::string>
SplitComma(const std::string& s)
{
    std::vector<std::string> out;
    std::string cur;
    std::istringstream is(s);
    while (std::getline(is, cur, ','))
    {
        // trim spaces
        size_t a = cur.find_first_not_of(" \t");
        size_t b = cur.find_last_not_of(" \t");
        out.push_back(a == std::string::npos ? "" : cur.substr(a, b - a + 1));
    }
    return out;
}

[[noreturn]] void
Fail(const std::string& msg)
{
    std::cerr << "dumbbell: " << msg << std::endl;
    std::exit(2);
}

std::vector<double>
ParseList(const std::string& name, const std::string& s, uint32_t n, double dflt)
{
    std::vector<double> v;
    if (s.empty())
    {
        return std::vector<double>(n, dflt);
    }
    for (const auto& tok : SplitComma(s))
    {
        try
        {
            size_t used = 0;
            double x = std::stod(tok, &used);
            if (used != tok.size() || !std::isfinite(x))
            {
                throw std::invalid_argument(tok);
            }
            v.push_back(x);
        }
        catch (const std::exception&)
        {
            Fail("--" + name + "=" + s + ": not a comma list of numbers");
        }
    }
    if (v.size() == 1)
    {
        v.assign(n, v[0]);
    }
    if (v.size() != n)
    {
        Fail("--" + name + "=" + s + ": give one value or one per flow (" + std::to_string(n) +
             ")");
    }
    return v;
}

std::string
CcTypeName(const std::string& cc)
{
    std::string low = cc;
    std::transform(low.begin(), low.end(), low.begin(), ::tolower);
    static const std::map<std::string, std::string> alias = {{"newreno", "TcpNewReno"},
                                                             {"reno", "TcpNewReno"},
                                                             {"cubic", "TcpCubic"},
                                                             {"vegas", "TcpVegas"},
                                                             {"bbr", "TcpBbr"}};
    auto it = alias.find(low);
    std::string name = it != alias.end() ? it->second : cc;
    if (name.rfind("ns3::", 0) == 0)
    {
        name = name.substr(5);
    }
    // Not TypeId::IsChildOf: ns-3.37 registers TcpCubic with TcpSocketBase as its parent.
    TypeId tid;
    bool ok = TypeId::LookupByNameFailSafe("ns3::" + name, &tid) && tid.HasConstructor();
    if (ok)
    {
        ObjectFactory factory(tid.GetName());
        ok = DynamicCast<TcpCongestionOps>(factory.Create()) != nullptr;
    }
    if (!ok)
    {
        Fail("--cc=" + cc + ": not an ns-3 TCP congestion control (TcpNewReno, TcpCubic, "
                            "TcpVegas, TcpBbr, ...)");
    }
    return name;
}

// --------------------------------------------------------------------------------------------
// packet classification: raw bytes, so it works with or without the PPP header

struct PktInfo
{
    int flow{-1};          // index of the sending flow, -1 if not from a sender
    uint32_t ipBytes{0};   // IPv4 total length
    uint32_t payload{0};   // TCP payload bytes
};

std::unordered_map<uint32_t, int> g_flowBySrc; // sender IPv4 address -> flow index

PktInfo
Classify(Ptr<const Packet> p)
{
    uint8_t b[2 + 60 + 14];
    uint32_t n = p->CopyData(b, sizeof(b));
    PktInfo info;
    uint32_t off = 0;
    if (n >= 2 && b[0] == 0x00 && b[1] == 0x21)
    {
        off = 2; // PPP header, protocol IPv4
    }
    if (n < off + 20 || (b[off] >> 4) != 4)
    {
        return info;
    }
    uint32_t ihl = (b[off] & 0xf) * 4u;
    uint32_t total = (uint32_t(b[off + 2]) << 8) | b[off + 3];
    uint32_t src = (uint32_t(b[off + 12]) << 24) | (uint32_t(b[off + 13]) << 16) |
                   (uint32_t(b[off + 14]) << 8) | uint32_t(b[off + 15]);
    info.ipBytes = total;
    auto it = g_flowBySrc.find(src);
    info.flow = it == g_flowBySrc.end() ? -1 : it->second;
    if (b[off + 9] == 6 && n >= off + ihl + 13)
    {
        uint32_t thl = (b[off + ihl + 12] >> 4) * 4u;
        info.payload = total > ihl + thl ? total - ihl - thl : 0;
    }
    return info;
}

// --------------------------------------------------------------------------------------------
// state

struct TxRec
{
    int64_t sentNs;
    uint32_t len;
    bool retx;
};

struct FlowStats
{
    // config
    double rttS{0}, startS{0}, stopS{0}, accessDelayS{0};
    std::string cc;
    bool pacing{false};
    // counters over the measurement window (data segments only unless noted)
    uint64_t arrivals{0};       // data packets offered to the bottleneck (incl. random losses)
    uint64_t arrivalBytes{0};   // IP bytes of those
    uint64_t queueDrops{0};     // drop-tail drops
    uint64_t randomLost{0};     // random losses
    uint64_t delivered{0};      // packets of the flow that crossed the bottleneck (any kind)
    uint64_t deliveredBytes{0}; // their IP bytes
    uint64_t goodputBytes{0};   // payload bytes handed to the receiving application
    uint64_t sentSegs{0};       // data segments handed to IP by the sender (incl. retx)
    uint64_t retxSegs{0};       // of which retransmissions
    uint64_t timeouts{0};       // retransmission timeouts (entries into CA_LOSS)
    uint64_t recoveries{0};     // fast-retransmit loss episodes (entries into CA_RECOVERY)
    std::vector<double> rttSamples; // seconds
    std::vector<uint64_t> seriesBytes;
    std::vector<double> cwndSeries;
    uint32_t cwnd{0};
    uint32_t segSize{1448};
    bool hooked{false}; // the sender's socket exists and is traced
    // RTT bookkeeping (not windowed)
    std::map<uint64_t, TxRec> outstanding; // unacked, unsampled segments by 64-bit seq
    uint64_t highTx{0};
};

struct LinkStats
{
    uint64_t txBytes{0};     // IP bytes whose transmission on A->B ended in the window
    uint64_t arrivals{0};    // data packets offered to the bottleneck (incl. random losses)
    uint64_t queueDrops{0};  // data packets dropped by drop-tail
    uint64_t randomLost{0};  // data packets lost at random
    uint64_t allDrops{0};    // drop-tail drops of any packet kind
    uint64_t dequeued{0};    // packets dequeued in the window (any kind)
    double sojournSum{0};    // their total queueing delay, s
    double sojournMax{0};
    std::deque<int64_t> enqueueNs; // FIFO of enqueue times of queued packets
    uint32_t qlen{0};
    int64_t qlenSinceNs{0};
    std::vector<double> qArea;   // pkt*s per interval
    std::vector<uint64_t> seriesTxBytes;
    uint64_t otherDrops{0};      // drops anywhere but the bottleneck (should stay 0)
};

std::vector<FlowStats> g_flows;
LinkStats g_link;
double g_warmupS = 0, g_durationS = 0, g_intervalS = 0.1;
uint32_t g_nIntervals = 0;
bool g_lossIngress = true;

inline bool
InWindow()
{
    double t = Simulator::Now().GetSeconds();
    return t >= g_warmupS && t <= g_durationS;
}

inline uint32_t
IntervalIndex()
{
    double t = Simulator::Now().GetSeconds();
    auto k = static_cast<int64_t>(std::floor(t / g_intervalS + 1e-12));
    if (k < 0)
    {
        k = 0;
    }
    if (k >= static_cast<int64_t>(g_nIntervals))
    {
        k = g_nIntervals - 1;
    }
    return static_cast<uint32_t>(k);
}

uint64_t
Unwrap(uint32_t v, uint64_t ref)
{
    const uint64_t span = 1ULL << 32;
    uint64_t c = (ref & ~(span - 1)) | v;
    if (c > ref && c - ref > span / 2 && c >= span)
    {
        c -= span;
    }
    else if (c < ref && ref - c > span / 2)
    {
        c += span;
    }
    return c;
}

// --------------------------------------------------------------------------------------------
// random loss of data segments

class DataLossModel : public ErrorModel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("ccjax::DataLossModel")
                                .SetParent<ErrorModel>()
                                .SetGroupName("Network")
                                .AddConstructor<DataLossModel>();
        return tid;
    }

    double m_p{0};
    Ptr<UniformRandomVariable> m_rv;

  private:
    bool DoCorrupt(Ptr<Packet> p) override
    {
        PktInfo info = Classify(p);
        if (info.payload == 0 || info.flow < 0)
        {
            return false;
        }
        bool lost = m_p > 0 && m_rv->GetValue() < m_p;
        if (lost && InWindow())
        {
            FlowStats& f = g_flows[info.flow];
            f.randomLost++;
            g_link.randomLost++;
            if (g_lossIngress)
            {
                f.arrivals++;
                f.arrivalBytes += info.ipBytes;
                g_link.arrivals++;
            }
        }
        return lost;
    }

    void DoReset() override
    {
    }
};

NS_OBJECT_ENSURE_REGISTERED(DataLossModel);

// --------------------------------------------------------------------------------------------
// access channel with sender-side jitter

// A point-to-point channel that delays each packet of its first direction (sender -> A) by an
// extra uniform [0, jitter) on top of the propagation delay, without reordering (a packet never
// arrives before the one sent ahead of it). It plays the part of ns-2's random per-packet
// sender "overhead": without it, ACK-clocked senders in a deterministic simulator phase-lock
// with the bottleneck's departures, and drop-tail picks its victims by phase (Floyd & Jacobson,
// "On traffic phase effects in packet-switched gateways", 1992).
// It also ends a flow at its stop time: ns-3's BulkSendApplication::StopApplication closes the
// socket gracefully, and TCP would go on sending everything already in its (large) send buffer,
// so from the stop time on, the channel discards what the sender transmits. Packets already past
// the access link are still delivered.
class JitterChannel : public PointToPointChannel
{
  public:
    static TypeId GetTypeId()
    {
        static TypeId tid = TypeId("ccjax::JitterChannel")
                                .SetParent<PointToPointChannel>()
                                .SetGroupName("PointToPoint")
                                .AddConstructor<JitterChannel>();
        return tid;
    }

    Time m_jitter{0};
    Ptr<UniformRandomVariable> m_rv;
    Time m_stopAt{Time::Max()}; // from then on, the sender's packets are discarded
    uint64_t m_discarded{0};

    bool TransmitStart(Ptr<const Packet> p, Ptr<PointToPointNetDevice> src, Time txTime) override
    {
        uint32_t wire = src == GetSource(0) ? 0 : 1;
        Ptr<PointToPointNetDevice> dst = GetDestination(wire);
        if (wire == 0 && Simulator::Now() >= m_stopAt)
        {
            m_discarded++;
            return true;
        }
        Time delay = txTime + GetDelay();
        if (wire == 0 && m_jitter.IsStrictlyPositive())
        {
            auto extraNs = static_cast<int64_t>(m_rv->GetValue() * m_jitter.GetNanoSeconds());
            Time at = Simulator::Now() + delay + NanoSeconds(extraNs);
            at = std::max(at, m_lastArrival);
            m_lastArrival = at;
            delay = at - Simulator::Now();
        }
        Simulator::ScheduleWithContext(dst->GetNode()->GetId(),
                                       delay,
                                       &PointToPointNetDevice::Receive,
                                       dst,
                                       p->Copy());
        return true;
    }

  private:
    Time m_lastArrival{0};
};

NS_OBJECT_ENSURE_REGISTERED(JitterChannel);

// Two point-to-point devices joined by a JitterChannel (what PointToPointHelper::Install does;
// the queues are sized never to fill).
NetDeviceContainer
InstallAccess(Ptr<Node> a,
              Ptr<Node> b,
              DataRate rate,
              Time delay,
              Time jitter,
              int64_t stream,
              Time stopAt = Time::Max())
{
    NetDeviceContainer c;
    Ptr<JitterChannel> ch = CreateObject<JitterChannel>();
    ch->m_stopAt = stopAt;
    ch->SetAttribute("Delay", TimeValue(delay));
    ch->m_jitter = jitter;
    ch->m_rv = CreateObject<UniformRandomVariable>();
    ch->m_rv->SetStream(stream);
    for (Ptr<Node> n : {a, b})
    {
        Ptr<PointToPointNetDevice> d = CreateObject<PointToPointNetDevice>();
        d->SetAddress(Mac48Address::Allocate());
        d->SetDataRate(rate);
        n->AddDevice(d);
        Ptr<DropTailQueue<Packet>> q = CreateObject<DropTailQueue<Packet>>();
        q->SetMaxSize(QueueSize("100000p"));
        d->SetQueue(q);
        Ptr<NetDeviceQueueInterface> ndqi = CreateObject<NetDeviceQueueInterface>();
        ndqi->GetTxQueue(0)->ConnectQueueTraces(q);
        d->AggregateObject(ndqi);
        d->Attach(ch);
        c.Add(d);
    }
    return c;
}

// --------------------------------------------------------------------------------------------
// bottleneck traces

void
QueueAreaAdvance()
{
    int64_t now = Simulator::Now().GetNanoSeconds();
    int64_t t = g_link.qlenSinceNs;
    auto stepNs = static_cast<int64_t>(std::llround(g_intervalS * 1e9));
    while (t < now)
    {
        int64_t k = t / stepNs;
        int64_t end = std::min(now, (k + 1) * stepNs);
        if (k < static_cast<int64_t>(g_nIntervals))
        {
            g_link.qArea[k] += g_link.qlen * (end - t) * 1e-9;
        }
        t = end;
    }
    g_link.qlenSinceNs = now;
}

void
OnOffered(const PktInfo& info)
{
    if (info.payload == 0 || info.flow < 0 || !InWindow())
    {
        return;
    }
    FlowStats& f = g_flows[info.flow];
    f.arrivals++;
    f.arrivalBytes += info.ipBytes;
    g_link.arrivals++;
}

void
OnEnqueue(Ptr<const Packet> p)
{
    QueueAreaAdvance();
    g_link.qlen++;
    g_link.enqueueNs.push_back(Simulator::Now().GetNanoSeconds());
    OnOffered(Classify(p));
}

void
OnDequeue(Ptr<const Packet>)
{
    QueueAreaAdvance();
    if (g_link.qlen > 0)
    {
        g_link.qlen--;
    }
    if (g_link.enqueueNs.empty())
    {
        return;
    }
    int64_t t0 = g_link.enqueueNs.front();
    g_link.enqueueNs.pop_front();
    if (InWindow())
    {
        double s = (Simulator::Now().GetNanoSeconds() - t0) * 1e-9;
        g_link.dequeued++;
        g_link.sojournSum += s;
        g_link.sojournMax = std::max(g_link.sojournMax, s);
    }
}

void
OnBottleneckDrop(Ptr<const Packet> p)
{
    PktInfo info = Classify(p);
    if (!InWindow())
    {
        return;
    }
    g_link.allDrops++;
    if (info.payload == 0 || info.flow < 0)
    {
        return;
    }
    OnOffered(info);
    g_flows[info.flow].queueDrops++;
    g_link.queueDrops++;
}

void
OnOtherDrop(Ptr<const Packet>)
{
    g_link.otherDrops++;
}

void
OnBottleneckTxEnd(Ptr<const Packet> p)
{
    PktInfo info = Classify(p);
    if (InWindow())
    {
        g_link.txBytes += info.ipBytes;
    }
    g_link.seriesTxBytes[IntervalIndex()] += info.ipBytes;
}

void
OnBottleneckRx(Ptr<const Packet> p)
{
    PktInfo info = Classify(p);
    if (info.flow < 0)
    {
        return;
    }
    FlowStats& f = g_flows[info.flow];
    f.seriesBytes[IntervalIndex()] += info.ipBytes;
    if (InWindow())
    {
        f.delivered++;
        f.deliveredBytes += info.ipBytes;
    }
}

void
OnSinkRx(int i, Ptr<const Packet> p, const Address&)
{
    if (InWindow())
    {
        g_flows[i].goodputBytes += p->GetSize();
    }
}

// --------------------------------------------------------------------------------------------
// sender socket traces: per-packet RTT (sent -> first ACK or SACK covering it, Karn's rule)

void
Sample(FlowStats& f, const TxRec& r)
{
    if (!r.retx && InWindow())
    {
        f.rttSamples.push_back((Simulator::Now().GetNanoSeconds() - r.sentNs) * 1e-9);
    }
}

void
OnTcpTx(int i, Ptr<const Packet> p, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    uint32_t len = p->GetSize();
    if (len == 0)
    {
        return;
    }
    FlowStats& f = g_flows[i];
    uint64_t seq = Unwrap(h.GetSequenceNumber().GetValue(), f.highTx);
    int64_t now = Simulator::Now().GetNanoSeconds();
    bool inWin = InWindow();
    if (inWin)
    {
        f.sentSegs++;
    }
    if (seq < f.highTx)
    {
        if (inWin)
        {
            f.retxSegs++;
        }
        auto it = f.outstanding.find(seq);
        if (it != f.outstanding.end())
        {
            it->second.retx = true;
        }
        else
        {
            f.outstanding[seq] = TxRec{now, len, true};
        }
    }
    else
    {
        f.outstanding[seq] = TxRec{now, len, false};
        f.highTx = seq + len;
    }
}

void
OnTcpRx(int i, Ptr<const Packet>, const TcpHeader& h, Ptr<const TcpSocketBase>)
{
    if (!(h.GetFlags() & TcpHeader::ACK))
    {
        return;
    }
    FlowStats& f = g_flows[i];
    uint64_t ack = Unwrap(h.GetAckNumber().GetValue(), f.highTx);
    auto& out = f.outstanding;
    while (!out.empty() && out.begin()->first + out.begin()->second.len <= ack)
    {
        Sample(f, out.begin()->second);
        out.erase(out.begin());
    }
    if (h.HasOption(TcpOption::SACK))
    {
        auto sack = DynamicCast<const TcpOptionSack>(h.GetOption(TcpOption::SACK));
        if (sack)
        {
            for (const auto& blk : sack->GetSackList())
            {
                uint64_t l = Unwrap(blk.first.GetValue(), f.highTx);
                uint64_t r = Unwrap(blk.second.GetValue(), f.highTx);
                for (auto it = out.lower_bound(l);
                     it != out.end() && it->first + it->second.len <= r;)
                {
                    Sample(f, it->second);
                    it = out.erase(it);
                }
            }
        }
    }
}

void
OnCwnd(int i, uint32_t, uint32_t v)
{
    g_flows[i].cwnd = v;
}

void
OnCongState(int i, TcpSocketState::TcpCongState_t, TcpSocketState::TcpCongState_t now)
{
    // Counted like the other counters, inside the measurement window only.
    if (!InWindow())
    {
        return;
    }
    if (now == TcpSocketState::CA_LOSS)
    {
        g_flows[i].timeouts++;
    }
    else if (now == TcpSocketState::CA_RECOVERY)
    {
        g_flows[i].recoveries++;
    }
}

void
HookSender(int i, Ptr<BulkSendApplication> app)
{
    Ptr<TcpSocketBase> s = DynamicCast<TcpSocketBase>(app->GetSocket());
    if (!s)
    {
        Fail("flow " + std::to_string(i) + ": no TCP socket at its start time");
    }
    FlowStats& f = g_flows[i];
    f.hooked = true;
    s->SetPacingStatus(f.pacing);
    if (f.cc == "TcpBbr")
    {
        // TcpBbr draws its ProbeBW cycle phase from random stream 4 by default: every BBR flow
        // would then draw the same phase. Give each flow its own stream.
        PointerValue ops;
        s->GetAttribute("CongestionOps", ops);
        Ptr<TcpBbr> bbr = ops.Get<TcpBbr>();
        if (bbr)
        {
            bbr->SetStream(1000 + i);
        }
    }
    UintegerValue seg;
    s->GetAttribute("SegmentSize", seg);
    f.segSize = static_cast<uint32_t>(seg.Get());
    bool ok = s->TraceConnectWithoutContext("Tx", MakeBoundCallback(&OnTcpTx, i)) &&
              s->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnTcpRx, i)) &&
              s->TraceConnectWithoutContext("CongestionWindow", MakeBoundCallback(&OnCwnd, i)) &&
              s->TraceConnectWithoutContext("CongState", MakeBoundCallback(&OnCongState, i));
    if (!ok)
    {
        Fail("could not connect the TCP socket traces");
    }
}

void
SampleSeries(uint32_t k)
{
    for (auto& f : g_flows)
    {
        f.cwndSeries[k] =
            f.hooked ? f.cwnd / double(f.segSize) : std::numeric_limits<double>::quiet_NaN();
    }
}

// --------------------------------------------------------------------------------------------
// JSON

std::string
Num(double x)
{
    if (!std::isfinite(x))
    {
        return "null";
    }
    std::ostringstream os;
    os << std::setprecision(10) << x;
    return os.str();
}

std::string
Str(const std::string& s)
{
    std::string o = "\"";
    for (char c : s)
    {
        if (c == '"' || c == '\\')
        {
            o += '\\';
        }
        o += c;
    }
    return o + "\"";
}

std::string
Arr(const std::vector<double>& v)
{
    std::string o = "[";
    for (size_t k = 0; k < v.size(); ++k)
    {
        o += (k ? "," : "") + Num(v[k]);
    }
    return o + "]";
}

double
Quantile(std::vector<double> v, double q)
{
    if (v.empty())
    {
        return std::numeric_limits<double>::quiet_NaN();
    }
    std::sort(v.begin(), v.end());
    double pos = q * (v.size() - 1);
    auto lo = static_cast<size_t>(std::floor(pos));
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
}

double
Ratio(double a, double b)
{
    return b > 0 ? a / b : 0.0;
}

} // namespace

int
main(int argc, char* argv[])
{
    auto wall0 = std::chrono::steady_clock::now();

    uint32_t flows = 1;
    double bwMbps = 10;
    std::string rttMs = "40";
    std::string startS;
    std::string stopS;
    uint32_t bufferPkts = 0;
    double loss = 0;
    std::string lossAt = "ingress";
    std::string cc = "TcpNewReno";
    double durationS = 10;
    uint32_t seed = 0;
    double intervalS = 0.1;
    double warmupS = 0;
    double btlDelayMs = -1;
    double accessMbps = -1;
    double jitterUs = -1;
    std::string recovery = "prr";
    bool timestamps = true;
    uint32_t initialCwnd = 10;
    uint32_t hystartDetect = 3;
    bool hystart = true;

    CommandLine cmd(__FILE__);
    cmd.AddValue("flows", "number of flows", flows);
    cmd.AddValue("bwMbps", "bottleneck capacity, Mbps of IP bytes", bwMbps);
    cmd.AddValue("rttMs", "base (propagation) RTT per flow, ms: one value or a comma list", rttMs);
    cmd.AddValue("startS", "start time per flow, s (comma list; default 0)", startS);
    cmd.AddValue("stopS", "stop time per flow, s (comma list; default: never)", stopS);
    cmd.AddValue("bufferPkts", "bottleneck drop-tail buffer, packets (default 1 BDP of max RTT)",
                 bufferPkts);
    cmd.AddValue("loss", "random loss probability of data segments at the bottleneck", loss);
    cmd.AddValue("lossAt", "ingress (before the queue) or egress (after the link)", lossAt);
    cmd.AddValue("cc", "TcpNewReno|TcpCubic|TcpVegas|TcpBbr, or a comma list per flow", cc);
    cmd.AddValue("durationS", "simulated time, s", durationS);
    cmd.AddValue("seed", "run number of the random-number generator", seed);
    cmd.AddValue("intervalS", "length of a series interval, s", intervalS);
    cmd.AddValue("warmupS", "measurement starts here, s", warmupS);
    cmd.AddValue("btlDelayMs", "one-way propagation delay of the bottleneck, ms (default "
                               "min(rtt)/4)",
                 btlDelayMs);
    cmd.AddValue("accessMbps", "access link rate, Mbps (default max(1000, 10*bwMbps))",
                 accessMbps);
    cmd.AddValue("jitterUs", "sender-side per-packet jitter, uniform [0, jitterUs) us, FIFO "
                             "(default: one bottleneck packet time; 0: off)",
                 jitterUs);
    cmd.AddValue("recovery", "loss recovery: prr (ns-3 default) or classic", recovery);
    cmd.AddValue("timestamps", "TCP timestamps (on: 1448-byte MSS; off: 1460)", timestamps);
    cmd.AddValue("initialCwnd", "initial congestion window, segments", initialCwnd);
    cmd.AddValue("hystartDetect", "TcpCubic HyStart detection: 1 packet train, 2 delay, 3 both "
                 "(ns-3 default)", hystartDetect);
    cmd.AddValue("hystart", "TcpCubic HyStart on (ns-3 default) or off", hystart);
    cmd.Parse(argc, argv);

    // ---- validation
    if (flows < 1 || flows > 4000)
    {
        Fail("--flows must be 1..4000");
    }
    if (!(bwMbps > 0) || !(bwMbps <= 1e5))
    {
        Fail("--bwMbps must be in (0, 1e5]");
    }
    if (!(durationS > 0))
    {
        Fail("--durationS must be > 0");
    }
    if (!(intervalS > 0) || intervalS > durationS)
    {
        Fail("--intervalS must be in (0, durationS]");
    }
    if (!(warmupS >= 0) || warmupS >= durationS)
    {
        Fail("--warmupS must be in [0, durationS)");
    }
    if (!(loss >= 0) || !(loss < 1))
    {
        Fail("--loss must be in [0, 1)");
    }
    if (lossAt != "ingress" && lossAt != "egress")
    {
        Fail("--lossAt must be ingress or egress");
    }
    if (recovery != "prr" && recovery != "classic")
    {
        Fail("--recovery must be prr or classic");
    }
    std::vector<double> rtt = ParseList("rttMs", rttMs, flows, 0);
    std::vector<double> start = ParseList("startS", startS, flows, 0);
    std::vector<double> stop = ParseList("stopS", stopS, flows, -1);
    std::vector<std::string> ccs = SplitComma(cc);
    if (ccs.size() == 1)
    {
        ccs.assign(flows, ccs[0]);
    }
    if (ccs.size() != flows)
    {
        Fail("--cc=" + cc + ": give one value or one per flow");
    }
    double minRtt = *std::min_element(rtt.begin(), rtt.end());
    double maxRtt = *std::max_element(rtt.begin(), rtt.end());
    if (!(minRtt > 0))
    {
        Fail("--rttMs values must be > 0");
    }
    if (btlDelayMs < 0)
    {
        btlDelayMs = minRtt / 4.0;
    }
    if (btlDelayMs > minRtt / 2.0 + 1e-9)
    {
        Fail("--btlDelayMs must be at most min(rtt)/2");
    }
    if (jitterUs < 0)
    {
        jitterUs = 1500.0 * 8.0 / bwMbps; // one bottleneck packet time, in us
    }
    if (accessMbps <= 0)
    {
        accessMbps = std::max(1000.0, 10.0 * bwMbps);
    }
    const double bdpPkts = bwMbps * 1e6 / 8.0 * maxRtt * 1e-3 / 1500.0;
    if (bufferPkts == 0)
    {
        bufferPkts = std::max<uint32_t>(1, static_cast<uint32_t>(std::ceil(bdpPkts)));
    }
    bool anyPacing = false;
    g_flows.resize(flows);
    g_warmupS = warmupS;
    g_durationS = durationS;
    g_intervalS = intervalS;
    g_nIntervals = static_cast<uint32_t>(std::ceil(durationS / intervalS - 1e-9));
    g_lossIngress = lossAt == "ingress";
    for (uint32_t i = 0; i < flows; ++i)
    {
        FlowStats& f = g_flows[i];
        f.rttS = rtt[i] * 1e-3;
        f.startS = start[i];
        f.stopS = stop[i] < 0 ? std::numeric_limits<double>::infinity() : stop[i];
        if (!(f.startS >= 0) || f.startS >= durationS)
        {
            Fail("--startS values must be in [0, durationS)");
        }
        if (!(f.stopS > f.startS))
        {
            Fail("--stopS values must be > the flow's start");
        }
        f.cc = CcTypeName(ccs[i]);
        f.pacing = f.cc == "TcpBbr";
        anyPacing = anyPacing || f.pacing;
        f.accessDelayS = f.rttS / 2.0 - btlDelayMs * 1e-3;
        f.seriesBytes.assign(g_nIntervals, 0);
        f.cwndSeries.assign(g_nIntervals, std::numeric_limits<double>::quiet_NaN());
    }
    g_link.qArea.assign(g_nIntervals, 0.0);
    g_link.seriesTxBytes.assign(g_nIntervals, 0);

    // ---- defaults
    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(seed + 1);
    const uint32_t segSize = timestamps ? 1448 : 1460;
    // Socket buffers well above anything cwnd can reach: the flows are never app/rwnd-limited.
    double bufBytes = std::max(8.0 * 1024 * 1024,
                               8.0 * (bwMbps * 1e6 / 8.0 * maxRtt * 1e-3 + bufferPkts * 1500.0));
    auto sockBuf = static_cast<uint32_t>(std::min(bufBytes, double(1u << 30)));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(segSize));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(initialCwnd));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(1));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(sockBuf));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(sockBuf));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(timestamps));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(Seconds(1.0)));
    // BBR asserts pacing when it is initialised, at socket creation: turn it on for every socket
    // when any flow is BBR; each sender then gets its own setting (HookSender) before it sends
    // data.
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(anyPacing));
    // ns-3.37 declares this attribute as an integer (m_hystartDetect), not an enum.
    NS_ABORT_MSG_IF(hystartDetect < 1 || hystartDetect > 3, "hystartDetect must be 1, 2 or 3");
    Config::SetDefault("ns3::TcpCubic::HyStartDetect", IntegerValue(hystartDetect));
    Config::SetDefault("ns3::TcpCubic::HyStart", BooleanValue(hystart));
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(recovery == "prr" ? TcpPrrRecovery::GetTypeId()
                                                     : TcpClassicRecovery::GetTypeId()));

    // ---- topology
    NodeContainer senders;
    senders.Create(flows);
    NodeContainer receivers;
    receivers.Create(flows);
    NodeContainer routers;
    routers.Create(2);
    Ptr<Node> A = routers.Get(0);
    Ptr<Node> B = routers.Get(1);
    InternetStackHelper stack;
    stack.InstallAll();

    const std::string bigQueue = "100000p";
    const DataRate accessRate(static_cast<uint64_t>(accessMbps * 1e6));

    PointToPointHelper btl;
    // 1502 wire bytes (PPP + IP) per 1500 IP bytes: the link carries exactly bwMbps of IP bytes
    const auto btlBps = static_cast<uint64_t>(std::llround(bwMbps * 1e6 * 1502.0 / 1500.0));
    btl.SetDeviceAttribute("DataRate", DataRateValue(DataRate(btlBps)));
    btl.SetChannelAttribute("Delay", TimeValue(Seconds(btlDelayMs * 1e-3)));
    btl.SetQueue("ns3::DropTailQueue<Packet>",
                 "MaxSize",
                 QueueSizeValue(QueueSize(std::to_string(bufferPkts) + "p")));
    NetDeviceContainer btlDevs = btl.Install(A, B);
    Ptr<PointToPointNetDevice> btlA = DynamicCast<PointToPointNetDevice>(btlDevs.Get(0));
    Ptr<PointToPointNetDevice> btlB = DynamicCast<PointToPointNetDevice>(btlDevs.Get(1));
    btlB->GetQueue()->SetMaxSize(QueueSize(bigQueue)); // reverse direction: ACKs only

    Ipv4AddressHelper addr;
    NetDeviceContainer all;
    addr.SetBase("10.255.0.0", "255.255.255.252");
    addr.Assign(btlDevs);
    all.Add(btlDevs);

    std::vector<Ipv4Address> recvAddr(flows);
    std::vector<NetDeviceContainer> accDevs(flows);
    addr.SetBase("10.0.0.0", "255.255.255.252");
    for (uint32_t i = 0; i < flows; ++i)
    {
        accDevs[i] = InstallAccess(senders.Get(i),
                                   A,
                                   accessRate,
                                   Seconds(g_flows[i].accessDelayS),
                                   MicroSeconds(1) * jitterUs,
                                   300 + i,
                                   std::isfinite(g_flows[i].stopS) ? Seconds(g_flows[i].stopS)
                                                                   : Time::Max());
        Ipv4InterfaceContainer ifc = addr.Assign(accDevs[i]);
        addr.NewNetwork();
        g_flowBySrc[ifc.GetAddress(0).Get()] = static_cast<int>(i);
        all.Add(accDevs[i]);
    }
    addr.SetBase("10.128.0.0", "255.255.255.252");
    for (uint32_t i = 0; i < flows; ++i)
    {
        NetDeviceContainer d =
            InstallAccess(B, receivers.Get(i), accessRate, Seconds(0), Time(0), 0);
        Ipv4InterfaceContainer ifc = addr.Assign(d);
        addr.NewNetwork();
        recvAddr[i] = ifc.GetAddress(1);
        all.Add(d);
    }
    // Only the devices' DropTail queues: no queue disc anywhere.
    TrafficControlHelper tch;
    tch.Uninstall(all);
    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    // ---- random loss
    std::vector<Ptr<DataLossModel>> lossModels;
    auto makeLoss = [&](int64_t stream) {
        Ptr<DataLossModel> em = CreateObject<DataLossModel>();
        em->m_p = loss;
        em->m_rv = CreateObject<UniformRandomVariable>();
        em->m_rv->SetStream(stream);
        lossModels.push_back(em);
        return em;
    };
    if (g_lossIngress)
    {
        for (uint32_t i = 0; i < flows; ++i)
        {
            accDevs[i].Get(1)->SetAttribute("ReceiveErrorModel", PointerValue(makeLoss(100 + i)));
        }
    }
    else
    {
        btlB->SetAttribute("ReceiveErrorModel", PointerValue(makeLoss(100)));
    }

    // ---- traces
    Ptr<Queue<Packet>> q = btlA->GetQueue();
    bool ok = q->TraceConnectWithoutContext("Enqueue", MakeCallback(&OnEnqueue)) &&
              q->TraceConnectWithoutContext("Dequeue", MakeCallback(&OnDequeue)) &&
              q->TraceConnectWithoutContext("Drop", MakeCallback(&OnBottleneckDrop)) &&
              btlA->TraceConnectWithoutContext("PhyTxEnd", MakeCallback(&OnBottleneckTxEnd)) &&
              btlB->TraceConnectWithoutContext("MacRx", MakeCallback(&OnBottleneckRx));
    // With no queue disc, the traffic-control layer drops what a full (stopped) device queue
    // cannot take. On A only the bottleneck device can fill up.
    for (uint32_t n = 0; n < NodeList::GetNNodes(); ++n)
    {
        Ptr<Node> node = NodeList::GetNode(n);
        Ptr<TrafficControlLayer> tc = node->GetObject<TrafficControlLayer>();
        ok = ok && tc &&
             tc->TraceConnectWithoutContext(
                 "TcDrop",
                 node == A ? MakeCallback(&OnBottleneckDrop) : MakeCallback(&OnOtherDrop));
        for (uint32_t d = 0; d < node->GetNDevices(); ++d)
        {
            auto dev = DynamicCast<PointToPointNetDevice>(node->GetDevice(d));
            if (dev && dev != btlA)
            {
                ok = ok && dev->GetQueue()->TraceConnectWithoutContext(
                               "Drop", MakeCallback(&OnOtherDrop));
            }
        }
    }
    if (!ok)
    {
        Fail("could not connect a trace source");
    }

    // ---- applications
    const uint16_t port = 5000;
    for (uint32_t i = 0; i < flows; ++i)
    {
        FlowStats& f = g_flows[i];
        senders.Get(i)->GetObject<TcpL4Protocol>()->SetAttribute(
            "SocketType",
            TypeIdValue(TypeId::LookupByName("ns3::" + f.cc)));

        PacketSinkHelper sinkH("ns3::TcpSocketFactory",
                               InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer sink = sinkH.Install(receivers.Get(i));
        sink.Start(Seconds(0));
        sink.Get(0)->TraceConnectWithoutContext("Rx", MakeBoundCallback(&OnSinkRx, int(i)));

        BulkSendHelper src("ns3::TcpSocketFactory", InetSocketAddress(recvAddr[i], port));
        src.SetAttribute("MaxBytes", UintegerValue(0));
        src.SetAttribute("SendSize", UintegerValue(segSize));
        ApplicationContainer app = src.Install(senders.Get(i));
        app.Start(Seconds(f.startS));
        if (std::isfinite(f.stopS))
        {
            app.Stop(Seconds(f.stopS));
        }
        Ptr<BulkSendApplication> bulk = DynamicCast<BulkSendApplication>(app.Get(0));
        // One nanosecond after the application created its socket (and sent the SYN).
        Simulator::Schedule(Seconds(f.startS) + NanoSeconds(1), &HookSender, int(i), bulk);
    }
    for (uint32_t k = 0; k < g_nIntervals; ++k)
    {
        double t = std::min((k + 1) * intervalS, durationS);
        // just before the interval's end, so that the last one lands before Stop
        Simulator::Schedule(Seconds(t) - NanoSeconds(1), &SampleSeries, k);
    }

    Simulator::Stop(Seconds(durationS));
    auto run0 = std::chrono::steady_clock::now();
    Simulator::Run();
    auto run1 = std::chrono::steady_clock::now();
    QueueAreaAdvance();
    uint64_t events = Simulator::GetEventCount();

    // ---- results
    const double measured = durationS - warmupS;
    const double capBytesPerS = bwMbps * 1e6 / 8.0;
    std::ostringstream js;
    js << "{\"flows\":[";
    double sumThr = 0;
    for (uint32_t i = 0; i < flows; ++i)
    {
        FlowStats& f = g_flows[i];
        double a = std::max(f.startS, warmupS);
        double b = std::min(f.stopS, durationS);
        double active = std::max(0.0, b - a);
        double thr = Ratio(f.deliveredBytes * 8.0 / 1e6, active);
        sumThr += Ratio(f.deliveredBytes * 8.0 / 1e6, measured);
        double meanRtt = std::numeric_limits<double>::quiet_NaN();
        double minRttS = meanRtt;
        double maxRttS = meanRtt;
        if (!f.rttSamples.empty())
        {
            maxRttS = *std::max_element(f.rttSamples.begin(), f.rttSamples.end());
            double s = 0;
            for (double x : f.rttSamples)
            {
                s += x;
            }
            meanRtt = s / f.rttSamples.size();
            minRttS = *std::min_element(f.rttSamples.begin(), f.rttSamples.end());
        }
        std::vector<double> thrSeries(g_nIntervals);
        for (uint32_t k = 0; k < g_nIntervals; ++k)
        {
            double len = std::min((k + 1) * intervalS, durationS) - k * intervalS;
            thrSeries[k] = f.seriesBytes[k] * 8.0 / 1e6 / len;
        }
        js << (i ? "," : "") << "{"
           << "\"cc\":" << Str(f.cc) << ",\"base_rtt_ms\":" << Num(f.rttS * 1e3)
           << ",\"start_s\":" << Num(f.startS)
           << ",\"stop_s\":" << (std::isfinite(f.stopS) ? Num(f.stopS) : "null")
           << ",\"active_s\":" << Num(active) << ",\"throughput_mbps\":" << Num(thr)
           << ",\"goodput_mbps\":" << Num(Ratio(f.goodputBytes * 8.0 / 1e6, active))
           << ",\"send_rate_mbps\":" << Num(Ratio(f.arrivalBytes * 8.0 / 1e6, active))
           << ",\"mean_rtt_ms\":" << Num(meanRtt * 1e3) << ",\"min_rtt_ms\":" << Num(minRttS * 1e3)
           << ",\"p95_rtt_ms\":" << Num(Quantile(f.rttSamples, 0.95) * 1e3)
           << ",\"max_rtt_ms\":" << Num(maxRttS * 1e3)
           << ",\"rtt_samples\":" << f.rttSamples.size()
           << ",\"loss_rate\":"
           << Num(Ratio(double(f.queueDrops + f.randomLost), double(f.arrivals)))
           << ",\"pkts_offered\":" << f.arrivals << ",\"pkts_delivered\":" << f.delivered
           << ",\"queue_drops\":" << f.queueDrops << ",\"random_losses\":" << f.randomLost
           << ",\"segments_sent\":" << f.sentSegs << ",\"retransmissions\":" << f.retxSegs
           << ",\"timeouts\":" << f.timeouts << ",\"recoveries\":" << f.recoveries
           << ",\"throughput_series_mbps\":" << Arr(thrSeries)
           << ",\"cwnd_series_pkts\":" << Arr(f.cwndSeries) << "}";
    }
    std::vector<double> utilSeries(g_nIntervals), qSeries(g_nIntervals);
    for (uint32_t k = 0; k < g_nIntervals; ++k)
    {
        double len = std::min((k + 1) * intervalS, durationS) - k * intervalS;
        utilSeries[k] = g_link.seriesTxBytes[k] / (capBytesPerS * len);
        qSeries[k] = g_link.qArea[k] / len;
    }
    double pktTxS = 1500.0 / capBytesPerS;
    js << "],\"link\":{"
       << "\"capacity_mbps\":" << Num(bwMbps) << ",\"buffer_pkts\":" << bufferPkts
       << ",\"bdp_pkts\":" << Num(bdpPkts) << ",\"btl_delay_ms\":" << Num(btlDelayMs)
       << ",\"access_mbps\":" << Num(accessMbps) << ",\"jitter_us\":" << Num(jitterUs)
       << ",\"pkt_tx_ms\":" << Num(pktTxS * 1e3)
       << ",\"utilization\":" << Num(g_link.txBytes / (capBytesPerS * measured))
       << ",\"throughput_sum_mbps\":" << Num(sumThr)
       << ",\"mean_queue_delay_ms\":"
       << Num(g_link.dequeued ? g_link.sojournSum / g_link.dequeued * 1e3
                              : std::numeric_limits<double>::quiet_NaN())
       << ",\"max_queue_delay_ms\":" << Num(g_link.sojournMax * 1e3)
       << ",\"drop_rate\":"
       << Num(Ratio(double(g_link.queueDrops + g_link.randomLost), double(g_link.arrivals)))
       << ",\"pkts_offered\":" << g_link.arrivals << ",\"queue_drops\":" << g_link.queueDrops
       << ",\"random_losses\":" << g_link.randomLost << ",\"pkts_dequeued\":" << g_link.dequeued
       << ",\"other_drops\":" << g_link.otherDrops
       << ",\"utilization_series\":" << Arr(utilSeries)
       << ",\"queue_series_pkts\":" << Arr(qSeries) << "}";
    auto wall1 = std::chrono::steady_clock::now();
    js << ",\"config\":{\"flows\":" << flows << ",\"loss\":" << Num(loss)
       << ",\"loss_at\":" << Str(lossAt) << ",\"duration_s\":" << Num(durationS)
       << ",\"warmup_s\":" << Num(warmupS) << ",\"interval_s\":" << Num(intervalS)
       << ",\"seed\":" << seed << ",\"recovery\":" << Str(recovery)
       << ",\"timestamps\":" << (timestamps ? "true" : "false") << ",\"segment_size\":" << segSize
       << ",\"initial_cwnd\":" << initialCwnd << ",\"socket_buffer_bytes\":" << sockBuf << "}"
       << ",\"sim\":{\"simulator\":\"ns-3.37\",\"wall_s\":"
       << Num(std::chrono::duration<double>(wall1 - wall0).count())
       << ",\"run_wall_s\":" << Num(std::chrono::duration<double>(run1 - run0).count())
       << ",\"events\":" << events << "}}";
    std::cout << js.str() << std::endl;
    Simulator::Destroy();
    return 0;
}
