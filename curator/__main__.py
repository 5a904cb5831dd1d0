from curator.cli.main import main

main()
