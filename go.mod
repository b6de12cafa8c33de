module github.com/virga-ml/virga

go 1.26.8
