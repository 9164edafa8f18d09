package middleware_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/go-chi/chi/v5"
	chimiddleware "github.com/go-chi/chi/v5/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/middleware"
)

func Example() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()

	responses, err := middleware.NewCache(rdb, cache.Options{Namespace: "http"})
	if err != nil {
		log.Fatal(err)
	}
	defer responses.Close()

	r := chi.NewRouter()
	r.Use(chimiddleware.GetHead) // HEAD goes to the GET route, answered from its entry
	r.With(middleware.Cache(responses)).Get("/reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "report %s", chi.URLParam(r, "id"))
	})
	srv := httptest.NewServer(r)
	defer srv.Close()

	for range 2 {
		res, err := http.Get(srv.URL + "/reports/42")
		if err != nil {
			log.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		fmt.Println(res.Header.Get("X-Cache"), string(body))
	}
	head, err := http.Head(srv.URL + "/reports/42")
	if err != nil {
		log.Fatal(err)
	}
	head.Body.Close()
	fmt.Println(head.Request.Method, head.Header.Get("X-Cache"), head.ContentLength)
	// On an empty Redis, this prints:
	//   MISS report 42
	//   HIT report 42
	//   HEAD HIT 9
}
