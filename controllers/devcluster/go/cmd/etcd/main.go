// Command etcd runs a single-member etcd on loopback for the dev cluster,
// built from etcd's embed package at the version Kubernetes requires.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "", "directory for the member's data (required)")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL, loopback only")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL, loopback only")
	flag.Parse()
	if *dataDir == "" {
		log.Fatal("--data-dir is required")
	}
	client, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("--listen-client-url: %v", err)
	}
	peer, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("--listen-peer-url: %v", err)
	}

	cfg := embed.NewConfig()
	cfg.Name = "devcluster"
	cfg.Dir = *dataDir
	cfg.ListenClientUrls = []url.URL{*client}
	cfg.AdvertiseClientUrls = []url.URL{*client}
	cfg.ListenPeerUrls = []url.URL{*peer}
	cfg.AdvertisePeerUrls = []url.URL{*peer}
	cfg.InitialCluster = cfg.Name + "=" + peer.String()
	cfg.LogLevel = "warn"
	// A dev cluster lives minutes; keep etcd's disk use small.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"
	cfg.QuotaBackendBytes = 2 << 30

	server, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	defer server.Close()

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-server.Server.ReadyNotify():
		log.Printf("etcd ready on %s", client)
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	case <-signals:
		return
	}
	select {
	case err := <-server.Err():
		log.Fatalf("etcd: %v", err)
	case <-signals:
	}
}
